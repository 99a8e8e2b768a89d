#include "worker/distributed_sampler.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <numeric>

#include "common/error.hpp"

namespace ddprun::worker {
namespace {
int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

DistributedSampler::DistributedSampler(int64_t datasetSize, int64_t numReplicas, int64_t rank, bool shuffle,
                                       uint64_t seed, bool dropLast)
    : datasetSize_(datasetSize),
      numReplicas_(numReplicas),
      rank_(rank),
      shuffle_(shuffle),
      seed_(seed),
      dropLast_(dropLast) {
  if (datasetSize <= 0) throw ConfigError("DistributedSampler: the data set is empty");
  if (numReplicas <= 0) throw ConfigError("DistributedSampler: world size must be positive");
  if (rank < 0 || rank >= numReplicas) {
    throw ConfigError("DistributedSampler: invalid rank " + std::to_string(rank) + ", rank should be in [0, " +
                      std::to_string(numReplicas - 1) + "]");
  }
  // Same arithmetic as PyTorch, including its quirk for drop_last with a divisible size.
  if (dropLast && datasetSize % numReplicas != 0) {
    numSamples_ = ceilDiv(datasetSize - numReplicas, numReplicas);
  } else {
    numSamples_ = ceilDiv(datasetSize, numReplicas);
  }
  if (numSamples_ <= 0) throw ConfigError("DistributedSampler: fewer samples than ranks with drop_last");
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> order(static_cast<size_t>(datasetSize_));
  if (shuffle_) {
    auto generator = at::detail::createCPUGenerator(seed_ + static_cast<uint64_t>(epoch_));
    torch::Tensor perm = torch::randperm(datasetSize_, generator, torch::kLong);
    std::copy_n(perm.data_ptr<int64_t>(), datasetSize_, order.begin());
  } else {
    std::iota(order.begin(), order.end(), 0);
  }
  const int64_t total = totalSize();
  if (!dropLast_) {
    // Wrap-around padding: repeat the list from its start until it has `total` entries.
    for (int64_t i = datasetSize_; i < total; ++i) order.push_back(order[static_cast<size_t>(i % datasetSize_)]);
  } else {
    order.resize(static_cast<size_t>(total));
  }
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(numSamples_));
  for (int64_t i = rank_; i < total; i += numReplicas_) mine.push_back(order[static_cast<size_t>(i)]);
  return mine;
}

}  // namespace ddprun::worker
