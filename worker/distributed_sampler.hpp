#pragma once
// A re-implementation of torch.utils.data.DistributedSampler (PyTorch 1.13,
// torch/utils/data/distributed.py) that yields the very same per-rank index lists: the permutation is
// torch.randperm(n) from a CPU generator seeded with seed + epoch, the list is padded by wrap-around
// to a multiple of the world size (or truncated with drop_last), and rank r takes r, r+W, r+2W, ….
#include <cstdint>
#include <vector>

namespace ddprun::worker {

class DistributedSampler {
 public:
  /// `datasetSize` > 0 samples split over `numReplicas` ranks; `rank` in [0, numReplicas).
  /// Throws ConfigError on an out-of-range rank or replica count.
  DistributedSampler(int64_t datasetSize, int64_t numReplicas, int64_t rank, bool shuffle = true, uint64_t seed = 0,
                     bool dropLast = false);

  /// Selects the epoch whose shuffle `indices()` returns (PyTorch's set_epoch).
  void setEpoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

  /// This rank's indices for the current epoch; numSamples() long.
  std::vector<int64_t> indices() const;

  /// Samples per rank per epoch (PyTorch's len(sampler)).
  int64_t numSamples() const { return numSamples_; }
  /// numSamples() * numReplicas.
  int64_t totalSize() const { return numSamples_ * numReplicas_; }

 private:
  int64_t datasetSize_;
  int64_t numReplicas_;
  int64_t rank_;
  bool shuffle_;
  uint64_t seed_;
  bool dropLast_;
  int64_t epoch_ = 0;
  int64_t numSamples_;
};

}  // namespace ddprun::worker
