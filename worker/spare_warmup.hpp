#pragma once
// What a spare rank (common/spare_rank.hpp) does before it is claimed: the rank-independent part of a rank's start.
#include "worker/mnist_data.hpp"
#include "worker/options.hpp"

namespace ddprun::worker {

/// One training step of a throwaway model of the kind `options` names, on the first batch of `data`'s train split,
/// on the CPU: it pays LibTorch's first-use costs (operator dispatch, kernels' lazy set-up, the intra-op pool) and
/// the allocator's first page faults, which otherwise fall into a new rank's first steps (15-20 ms on a 2-core VM).
/// Nothing it computes is kept; the global generator is left as it was. Does nothing for an empty split.
void warmUpSpareRank(const WorkerOptions& options, const Dataset& data);

}  // namespace ddprun::worker
