#pragma once
// The training step under a StepRecorder (--cuda-graph): the static tensors a recording reads, the eager warm-ups
// before it, what is recorded (two parts around the allreduce) and when it must be recorded again. The step's own
// work comes from the trainer as callbacks, so this sequencing is tested with fakes (recorded_step_test.cpp).
#include <torch/torch.h>

#include <functional>
#include <memory>

#include "worker/mnist_data.hpp"
#include "worker/step_graph.hpp"

namespace ddprun::worker {

class RecordedStep {
 public:
  static constexpr int kWarmUps = 3;  ///< eager steps before the recording, as PyTorch's notes on CUDA graphs warm up

  /// The step's work in the parts a recording can hold; the allreduce stays between them, eager, so that torch's
  /// watchdog and flight recorder see it.
  struct Parts {
    /// Zeroed gradients, forward, loss, backward: the gradients in their buckets, the loss added to its sum.
    std::function<void(const torch::Tensor& images, const torch::Tensor& labels)> backward;
    /// Starts and awaits the gradients' allreduces (eager, also between replays); returns the seconds it waited.
    /// Empty when there is nothing to reduce (one rank): the whole step is then one recording. `replayed`: the
    /// gradients were written by a replay, whose hooks did not run on the host.
    std::function<double(bool replayed)> awaitAllreduces;
    /// Writes the averaged gradients and steps the optimizer.
    std::function<void()> update;
  };

  /// `train` is the data set the indices select from (on the training device), `batchSize` the full batch: the
  /// only size recorded.
  RecordedStep(std::unique_ptr<StepRecorder> recorder, const Split& train, int64_t batchSize, Parts parts);

  /// Whether run() takes a batch of this many samples (others, like an epoch's smaller last batch, run eagerly).
  bool takes(int64_t samples) const { return samples == batchSize_; }
  /// One step on these sample indices (on the training device): an eager warm-up on the recorder's stream, or the
  /// recording followed by its replay, or a replay. Returns the seconds spent in awaitAllreduces. Throws what
  /// StepRecorder::record throws.
  double run(const torch::Tensor& batchIndices);
  /// Forgets the recordings: the state they ran on was replaced (a new group, momentum dropped); warm-ups and a
  /// new recording follow.
  void reset();
  /// Whether the step is recorded (replays run).
  bool recorded() const { return recorded_; }

 private:
  /// The first recorded part: the batch gathered into the static tensors by the static indices, then backward.
  void gatherAndBackward();

  std::unique_ptr<StepRecorder> recorder_;
  const Split& train_;
  int64_t batchSize_;
  Parts parts_;
  torch::Tensor indices_;  ///< the batch's sample indices, copied in before each run
  torch::Tensor images_;   ///< gathered by the recording
  torch::Tensor labels_;
  int warmUpsLeft_ = kWarmUps;
  bool recorded_ = false;
  size_t backwardRecording_ = 0;  ///< the whole step when there is nothing to reduce
  size_t updateRecording_ = 0;
};

}  // namespace ddprun::worker
