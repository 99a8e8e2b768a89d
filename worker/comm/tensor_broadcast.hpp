#pragma once
// Moving a set of tensors from one rank to all: the model's start-up state (every rank starts from rank 0's, as
// PyTorch's DDP constructor does with _sync_module_states) and a rank replacement's training state
// (rank_replacement.hpp).
#include <torch/torch.h>

#include <vector>

#include "worker/comm/communicator.hpp"

namespace ddprun::worker {

/// Broadcasts `tensors` from `root` into every rank's own tensors, in one collective per dtype (each dtype's
/// tensors concatenated, in order): exact for every dtype, unlike one concatenation, which would promote them
/// (an int64 counter through float32 loses digits). Every rank calls it with tensors of the same shapes and
/// dtypes in the same order. Throws what the communicator throws.
void broadcastTensors(std::vector<torch::Tensor>& tensors, Communicator& comm, int root);

}  // namespace ddprun::worker
