#pragma once
// Data-parallel gradient averaging with buckets, after PyTorch's DistributedDataParallel reducer
// (torch/csrc/distributed/c10d/reducer.cpp; S. Li et al., "PyTorch Distributed", VLDB 2020):
// parameters are grouped into buckets of about `bucketCapBytes` in reverse parameter order (the
// order in which backward produces their gradients); a bucket's allreduce starts as soon as all of
// its gradients are ready, buckets are launched strictly in index order so every rank issues the same
// collective sequence, and everything is awaited and divided by the world size before the optimizer step.
#include <torch/torch.h>

#include <memory>
#include <mutex>
#include <vector>

#include "worker/comm/communicator.hpp"

namespace ddprun::worker {

/// Bucket assignment: parameter indices per bucket. Parameters are taken from the last to the first;
/// a bucket is closed once it holds at least `bucketCapBytes` (so one large tensor forms its own bucket).
/// `sizesBytes[i]` is parameter i's gradient size in bytes. Buckets never mix dtypes or devices in
/// the worker's models, so only sizes matter here.
std::vector<std::vector<size_t>> assignBuckets(const std::vector<int64_t>& sizesBytes, int64_t bucketCapBytes);

class GradientReducer {
 public:
  /// `params` are the model's trainable parameters (same order on every rank). With `overlap` the
  /// allreduce of a bucket starts inside backward, from autograd hooks; without it all buckets start
  /// after backward. Registers one hook per parameter; keep the reducer alive as long as the model.
  GradientReducer(std::vector<torch::Tensor> params, Communicator& comm, int64_t bucketCapBytes, bool overlap);

  /// Call before each backward: resets the per-bucket readiness counters.
  void prepareForBackward();

  /// Call after backward: starts any bucket not yet started, waits for all, and writes the averaged
  /// gradient into each parameter's .grad. With overlap, the buckets that the last gradient completed start
  /// here, as blocking calls after the earlier ones: backward is over, nothing is left to overlap, and a
  /// blocking call may run on this thread instead of waking a helper (the shm backend's). Throws ddprun::Error naming a
  /// parameter that got no gradient (it would leave the ranks' collective sequences unequal), and c10d errors from
  /// peers.
  void finishBackward();
  /// finishBackward() in two halves, for a replayed step (--cuda-graph): the allreduces started and awaited (the
  /// same errors), then the averages written into each .grad, which a recording can hold (it reads and writes only
  /// the buckets and the gradients, no collective).
  void awaitAllreduces();
  void writeAveragedGradients();
  /// After a replayed backward (--cuda-graph, step_graph.hpp): the recorded hooks have copied every gradient into
  /// its bucket, but no hook ran on the host, so every gradient is marked arrived here; finishBackward() follows.
  /// Build the reducer without overlap for this: a hook must not start an allreduce inside a recording.
  void gradientsArrivedByReplay();
  /// After the group failed mid-step (rank replacement): drops the step's pending collectives, which belong to
  /// the failed group, before that group is destroyed; the next prepareForBackward() starts afresh.
  void abandonStep() { prepareForBackward(); }

  /// Whether a bucket's allreduce starts from the hooks, inside backward (the constructor's `overlap`).
  void setOverlap(bool overlap) { overlap_ = overlap; }

  size_t numBuckets() const { return buckets_.size(); }
  /// Parameter indices of bucket `b`, in the order they sit in its flat buffer.
  const std::vector<size_t>& bucketParams(size_t b) const { return buckets_[b].params; }

 private:
  struct Bucket {
    std::vector<size_t> params;
    std::vector<int64_t> offsets;  // element offset of each parameter in `flat`
    torch::Tensor flat;            // contiguous gradients of all params in the bucket
    size_t pending = 0;            // gradients still to arrive this iteration
    std::unique_ptr<PendingCollective> work;
  };

  void onGradient(size_t param, const torch::Tensor& grad);
  /// Throws for a parameter without a gradient; without overlap, starts every bucket.
  void startRemainingBuckets();
  torch::Tensor averagingScale() const;  ///< 1 / world size, a CPU scalar
  void awaitBucket(Bucket& bucket);
  void writeAverage(const Bucket& bucket, const torch::Tensor& scale);
  void launchReadyBuckets();

  std::vector<torch::Tensor> params_;
  Communicator& comm_;
  bool overlap_;
  std::vector<Bucket> buckets_;
  std::vector<std::pair<size_t, size_t>> location_;  // param -> (bucket, slot)
  std::vector<bool> gradSeen_;
  size_t gradsLeft_ = 0;   // parameters whose gradient has not arrived this iteration
  size_t nextBucket_ = 0;  // lowest bucket index not yet launched
  std::mutex mutex_;       // autograd may run hooks on device threads (CUDA)
};

/// Makes every rank's parameters and buffers equal to rank 0's (DDP's _sync_module_states), with one
/// coalesced broadcast; nothing without a process group.
void broadcastModuleState(torch::nn::Module& module, Communicator& comm);

}  // namespace ddprun::worker
