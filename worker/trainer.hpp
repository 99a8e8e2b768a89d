#pragma once
// The training loop: epochs of DistributedSampler batches, DDP gradient averaging, SGD, evaluation on
// the whole test set shared across ranks, progress logs, metrics, checkpoints and resume.
#include <torch/torch.h>

#include <functional>
#include <memory>

#include "common/progress_file.hpp"

#include "worker/checkpoint.hpp"
#include "worker/comm/communicator.hpp"
#include "worker/comm/dist_env.hpp"
#include "worker/comm/replaceable_communicator.hpp"
#include "worker/fault_injector.hpp"
#include "worker/flat_sgd.hpp"
#include "worker/gradient_reducer.hpp"
#include "worker/metrics_log.hpp"
#include "worker/mnist_data.hpp"
#include "worker/models.hpp"
#include "worker/options.hpp"
#include "worker/rank_replacement.hpp"
#include "worker/recorded_step.hpp"
#include "worker/step_graph.hpp"

namespace ddprun::worker {

/// Training produced a loss or parameter that is NaN or infinite: continuing would only spread it.
class TrainingDiverged : public Error {
 public:
  using Error::Error;
};

/// Test-set result of one evaluation, identical on every rank.
struct Evaluation {
  double loss = 0;      ///< mean cross-entropy
  double accuracy = 0;  ///< fraction correct, 0..1
  int64_t samples = 0;
  int64_t epoch = 0;  ///< 1-based epoch it followed
};

/// Final state of a run.
struct TrainResult {
  TrainingProgress progress;
  Evaluation lastEvaluation;  ///< of the last completed epoch (samples == 0 when none completed)
};

/// Where the trainer reports progress (see common/progress_file.hpp); empty: nowhere.
using ProgressSink = std::function<void(const ProgressRecord&)>;

class Trainer {
 public:
  /// Moves the data to the communicator's device and builds the optimizer and gradient reducer.
  Trainer(const WorkerOptions& options, const DistEnv& env, Communicator& comm, Dataset data,
          std::shared_ptr<Classifier> model, ProgressSink progress = {});

  /// Resumes from the newest checkpoint (if --checkpoint-dir has one), syncs the model from rank 0,
  /// and trains until --epochs or --max-steps. Reports progress after each step (phase "train"), before
  /// evaluation ("eval") and before a checkpoint ("checkpoint", on every rank: the others wait for rank 0's
  /// write), and "train" again after each of those. Throws on data, I/O or peer errors, and
  /// TrainingDiverged on a non-finite loss or parameter.
  TrainResult run();

  /// Evaluates the model on the test split: rank r takes samples r, r+W, …; sums are allreduced.
  Evaluation evaluate();

  /// ddprun --restart-scope rank (rank_replacement.hpp): `comm` must be the communicator this trainer was built
  /// with. When its group fails mid-training, run() abandons the step in flight, takes the next generation's
  /// group from `replacer` and the state of the rank furthest along, and trains on; a process started in a later
  /// generation (a replacement) takes its state from a survivor instead of a checkpoint.
  void enableRankReplacement(ReplaceableCommunicator& comm, GroupReplacer& replacer) {
    replaceable_ = &comm;
    replacer_ = &replacer;
  }

  /// Records the training step with `recorder` and replays it (step_graph.hpp); the constructor does so itself with
  /// CUDA graphs under --cuda-graph on a CUDA device. Tests pass a recorder that re-runs the work on the CPU. Turns
  /// off the overlap of allreduces with backward: a hook must not start a collective inside a recording.
  void recordStepsWith(std::unique_ptr<StepRecorder> recorder);

 private:
  /// Warns once for each entry of the checkpoint directory that is not a usable checkpoint; throws FlagError
  /// for one that would stop a later checkpoint from being written (a directory named like it).
  void checkOtherEntries(const CheckpointScan& scan, int64_t resumedStep) const;
  /// Whether this run writes a checkpoint after global step `step` (an epoch's end, a --checkpoint-every multiple
  /// inside an epoch, or the --max-steps stop), as trainToEnd() does.
  bool writesCheckpointAt(int64_t step) const;
  /// Optimizer steps per epoch on this rank (the sampler's share, in batches).
  int64_t stepsPerEpoch() const;
  /// The epochs from where progress_ stands to the end (re-entered after a group replacement).
  TrainResult trainToEnd();
  /// After the group failed: the next generation's group, then the state of the rank furthest along.
  void replaceFailedGroup(const CollectiveFailed& failure);
  /// Takes part in the state exchange of a new generation (protocol step 4); `fresh`: this process has no state.
  void syncStateWithGroup(bool fresh);
  /// Rank 0: removes what a checkpoint write killed half way left in --checkpoint-dir (at resume, and when a new
  /// rank 0 replaces one that may have died writing).
  void removeInterruptedCheckpointWrites() const;
  void resumeFromCheckpoint();
  bool trainEpoch();  // false when --max-steps stopped it
  /// One optimizer step; returns the seconds spent waiting for the gradients' allreduce (finishBackward).
  double trainStep(const torch::Tensor& batchIndices);
  /// Zeroed gradients, forward, loss, backward, and the loss added to the interval's sum: the step's device work
  /// up to the gradients' allreduce.
  void backwardPass(const torch::Tensor& images, const torch::Tensor& labels);
  /// Averages the gradients across the group (when there is one); returns the seconds spent waiting for it.
  double reduceGradients();
  void logInterval(int64_t stepsPerEpoch);
  void checkpoint();
  void checkLossIsFinite(double intervalLossSum) const;
  void checkParametersAreFinite() const;
  void reportProgress(const char* phase);

  WorkerOptions options_;
  DistEnv env_;
  Communicator& comm_;
  Dataset data_;
  std::shared_ptr<Classifier> model_;
  std::unique_ptr<FlatSgd> optimizer_;
  std::unique_ptr<GradientReducer> reducer_;
  std::unique_ptr<RecordedStep> recordedStep_;      ///< null: every step eager
  ReplaceableCommunicator* replaceable_ = nullptr;  ///< set by enableRankReplacement
  GroupReplacer* replacer_ = nullptr;
  FaultInjector faults_;
  MetricsLog metrics_;
  TrainingProgress progress_;
  ProgressSink progressSink_;   ///< empty: progress is not reported
  int64_t samplesThisRun_ = 0;  ///< samples this rank trained on in this process
  bool firstStepLogged_ = false;
  bool firstStepAfterJoin_ = false;  ///< a new generation formed: log its first step (rank replacement)
  double busySeconds_ = 0;           ///< seconds of steps spent on this rank's own work, not waiting in finishBackward

  // Interval statistics since the last progress line.
  torch::Tensor intervalLoss_;
  int64_t intervalSteps_ = 0;
  int64_t intervalSamples_ = 0;
  double intervalStart_ = 0;
  double epochStart_ = 0;
  int64_t epochSamples_ = 0;
  torch::Tensor epochLoss_;
  int64_t epochSteps_ = 0;
  /// The host's seconds in this epoch's steps: on CUDA, issuing the work (a step waits for the GPU only once its
  /// queue is full), so a figure near the epoch's time per step says the host bounds the step.
  double epochHostSeconds_ = 0;
};

/// Seconds on a monotonic clock.
double monotonicSeconds();

}  // namespace ddprun::worker
