#include "worker/trainer.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <string>

#include "common/error.hpp"
#include "worker/autocast_scope.hpp"
#include "worker/distributed_sampler.hpp"
#include "worker/options.hpp"
#include "worker/warning_signals.hpp"

namespace ddprun::worker {
namespace {
constexpr int64_t kEvalBatch = 1000;
int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// Copies a host tensor to `device` without blocking the host: through pinned memory on CUDA (the
/// pinned block stays reserved until the copy is done), a plain (no-op) `to` on the CPU.
torch::Tensor toDeviceAsync(const torch::Tensor& host, const torch::Device& device) {
  if (!device.is_cuda()) return host.to(device);
  return host.pin_memory().to(device, /*non_blocking=*/true);
}

/// Seconds that `work` took.
template <typename Work>
double secondsIn(Work&& work) {
  const double start = monotonicSeconds();
  work();
  return monotonicSeconds() - start;
}

/// Waits for the device's queued work, so wall-clock times cover it (CUDA runs asynchronously).
void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}
}  // namespace

double monotonicSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Trainer::Trainer(const WorkerOptions& options, const DistEnv& env, Communicator& comm, Dataset data,
                 std::shared_ptr<Classifier> model, ProgressSink progress)
    : options_(options),
      env_(env),
      comm_(comm),
      data_(std::move(data)),
      model_(std::move(model)),
      faults_(options, env.rank,
              env.commGeneration > 0 ? -1 : env.restartCount),  // a replacement injects nothing again
      metrics_(env.rank == 0 ? options.metricsFile : std::string()),
      progressSink_(std::move(progress)) {
  // The whole data set fits on any GPU (MNIST: 188 MB as float32), so it moves there once; batches are then
  // gathered on the device by index and no sample crosses PCIe again.
  const torch::Device device = comm_.device();
  for (Split* split : {&data_.train, &data_.test}) {
    split->images = split->images.to(device).contiguous();
    split->labels = split->labels.to(device).contiguous();
  }
  model_->to(device);
  optimizer_ = std::make_unique<FlatSgd>(
      model_->parameters(),
      torch::optim::SGDOptions(options_.lr).momentum(options_.momentum).weight_decay(options_.weightDecay));
  // Any real group gets the reducer, one rank too: `--backend nccl` with WORLD_SIZE=1 then runs the gradient
  // buckets through NCCL, as Python DDP does with one rank.
  if (comm_.formsGroup()) {
    const auto capBytes = static_cast<int64_t>(options_.bucketCapMb * 1024 * 1024);
    reducer_ = std::make_unique<GradientReducer>(model_->parameters(), comm_, capBytes, !options_.noOverlap);
  }
  progress_.worldSize = comm_.worldSize();
  progress_.batchSize = options_.batchSize;
  progress_.samplerSeed = options_.seed;
  // The interval's and the epoch's loss sums: a recorded step adds to the same tensor at every replay.
  const auto lossOptions = torch::TensorOptions().dtype(torch::kFloat64).device(device);
  intervalLoss_ = torch::zeros({}, lossOptions);
  epochLoss_ = torch::zeros({}, lossOptions);
  if (options_.cudaGraph != "off" && device.is_cuda()) recordStepsWith(makeCudaGraphRecorder(device));
}

void Trainer::recordStepsWith(std::unique_ptr<StepRecorder> recorder) {
  if (reducer_) reducer_->setOverlap(false);
  RecordedStep::Parts parts;
  parts.backward = [this](const torch::Tensor& images, const torch::Tensor& labels) { backwardPass(images, labels); };
  // One rank has nothing to reduce: backward's gradients are already the average, so the whole step is one
  // recording (an eager step of a 1-rank group still runs its allreduce of one, as Python DDP does).
  const bool reduces = reducer_ && comm_.worldSize() > 1;
  if (reduces) {
    parts.awaitAllreduces = [this](bool replayed) {
      if (replayed) reducer_->gradientsArrivedByReplay();
      return secondsIn([this] { reducer_->awaitAllreduces(); });
    };
  }
  parts.update = [this, reduces] {
    if (reduces) reducer_->writeAveragedGradients();
    optimizer_->step();
  };
  recordedStep_ =
      std::make_unique<RecordedStep>(std::move(recorder), data_.train, options_.batchSize, std::move(parts));
}

void Trainer::reportProgress(const char* phase) {
  if (progressSink_) progressSink_({progress_.globalStep, samplesThisRun_, phase, busySeconds_, {}});
}

void Trainer::checkOtherEntries(const CheckpointScan& scan, int64_t resumedStep) const {
  for (const auto& entry : scan.others) {
    if (entry.blocksWrite && entry.step && *entry.step > resumedStep && writesCheckpointAt(*entry.step)) {
      // Found now rather than when training reaches that step and the write fails.
      throw FlagError("--checkpoint-dir " + options_.checkpointDir + ": " + entry.name + " is " + entry.what +
                      "; the checkpoint of step " + std::to_string(*entry.step) +
                      " must be written under that name: remove or rename it");
    }
    spdlog::warn("--checkpoint-dir {}: {} is {}; skipped", options_.checkpointDir, entry.name, entry.what);
  }
}

int64_t Trainer::stepsPerEpoch() const {
  const DistributedSampler sampler(data_.train.size(), comm_.worldSize(), comm_.rank(), true,
                                   static_cast<uint64_t>(options_.seed), options_.dropLast);
  return ceilDiv(sampler.numSamples(), options_.batchSize);
}

bool Trainer::writesCheckpointAt(int64_t step) const {
  const int64_t perEpoch = stepsPerEpoch();
  const int64_t last = options_.epochs * perEpoch;
  const int64_t end = options_.maxSteps > 0 ? std::min(options_.maxSteps, last) : last;
  if (step > end) return false;
  if (step == end || step % perEpoch == 0) return true;
  return options_.checkpointEvery > 0 && step % options_.checkpointEvery == 0;
}

void Trainer::removeInterruptedCheckpointWrites() const {
  if (int stale = removeStaleTempFiles(options_.checkpointDir)) {
    spdlog::info("removed {} temp file(s) an interrupted checkpoint write left in {}", stale, options_.checkpointDir);
  }
}

void Trainer::resumeFromCheckpoint() {
  if (options_.checkpointDir.empty()) return;
  // Rank 0 picks the newest readable checkpoint; every rank then loads that same file.
  torch::Tensor chosen = torch::full({1}, -1, torch::kInt64);
  if (comm_.rank() == 0) {
    removeInterruptedCheckpointWrites();
    const CheckpointScan scan = scanCheckpointDir(options_.checkpointDir);
    for (const auto& path : scan.checkpoints) {
      try {
        progress_ = loadCheckpoint(path, *model_, *optimizer_, comm_.device());
        chosen[0] = progress_.globalStep;
        break;
      } catch (const CheckpointMismatch&) {
        throw;  // another model's checkpoints: training from scratch here would silently discard them
      } catch (const DataError& e) {
        spdlog::warn("skipping checkpoint: {}", e.what());
      }
    }
    checkOtherEntries(scan, chosen[0].item<int64_t>());
  }
  chosen = chosen.to(comm_.device());
  comm_.broadcast(chosen, 0);
  const int64_t step = chosen.cpu().item<int64_t>();
  if (step < 0) return;
  const std::string path = checkpointPath(options_.checkpointDir, step);
  if (comm_.rank() != 0) progress_ = loadCheckpoint(path, *model_, *optimizer_, comm_.device());
  const int64_t oldSamplesPerStep = progress_.worldSize * progress_.batchSize;
  const int64_t newSamplesPerStep = comm_.worldSize() * options_.batchSize;
  if (oldSamplesPerStep != newSamplesPerStep && progress_.stepInEpoch > 0) {
    spdlog::warn(
        "checkpoint was written with world size {} and batch {}; continuing from the same sample "
        "count with world size {} and batch {} (not bit-identical to an uninterrupted run)",
        progress_.worldSize, progress_.batchSize, comm_.worldSize(), options_.batchSize);
    progress_.stepInEpoch = progress_.stepInEpoch * oldSamplesPerStep / newSamplesPerStep;
  }
  if (progress_.samplerSeed != options_.seed) {
    spdlog::warn("checkpoint used --seed {}, continuing with its seed instead of {}", progress_.samplerSeed,
                 options_.seed);
  }
  progress_.worldSize = comm_.worldSize();
  progress_.batchSize = options_.batchSize;
  if (comm_.rank() == 0) {
    spdlog::info("resumed from {}: epoch {}, step {} of that epoch, global step {}", path, progress_.epoch + 1,
                 progress_.stepInEpoch, progress_.globalStep);
  }
}

TrainResult Trainer::run() {
  if (replacer_ != nullptr && env_.commGeneration > 0) {
    // A replacement rank: the survivors hold the state of the last completed step; no checkpoint is read. A rank 0
    // killed while it wrote a checkpoint left its temp file: the new rank 0 removes it, as a resumed run does.
    if (comm_.rank() == 0 && !options_.checkpointDir.empty()) removeInterruptedCheckpointWrites();
    syncStateWithGroup(true);
  } else {
    resumeFromCheckpoint();
    broadcastModuleState(*model_, comm_);
  }
  reportProgress("train");
  while (true) {
    try {
      return trainToEnd();
    } catch (const CollectiveFailed& failure) {
      if (replacer_ == nullptr) throw;
      replaceFailedGroup(failure);
    }
  }
}

void Trainer::replaceFailedGroup(const CollectiveFailed& failure) {
  if (failure.timedOut()) {
    // No rank was lost: one is stopped, hung or unreachable, and would be as absent from the next generation. ddprun
    // learns it from the store before this rank's exit and restarts the whole group rather than replace this rank.
    try {
      replacer_->markTimedOut(comm_.rank());
    } catch (const std::exception& e) {
      spdlog::warn("rank {}: could not tell ddprun that the collective timed out: {}", comm_.rank(),
                   firstLine(e.what()));
    }
    throw Error("the group's collective at global step " + std::to_string(progress_.globalStep) +
                " timed out with no rank lost (" + firstLine(failure.what()) +
                "); no replacement can help: ddprun restarts the whole group");
  }
  spdlog::warn(
      "rank {} (pid {}): the group failed at global step {} ({}); abandoning that step and waiting for "
      "ddprun's replacement rank",
      comm_.rank(), ::getpid(), progress_.globalStep, firstLine(failure.what()));
  // The step's pending collectives belong to the failed group: gone before it is.
  if (reducer_) reducer_->abandonStep();
  optimizer_->zeroGrad();
  // Gone before the next one forms: peers that wait on this rank (another node's, behind a Gloo connection, or this
  // node's behind the shm group) learn of the failure from it.
  replaceable_->leave("rank " + std::to_string(comm_.rank()) + " left the group after a failure");
  replaceable_->replace(replacer_->nextGroup());
  syncStateWithGroup(false);
}

void Trainer::syncStateWithGroup(bool fresh) {
  // The state as tensors, the same on every rank: progress, the CPU generator, parameters and buffers, and the
  // momentum buffers (made here where there are none yet: a new rank's optimizer has not stepped; the header says
  // whether the sender's had them, and made ones are dropped again when it had not).
  const bool hadMomentum = options_.momentum == 0 || optimizer_->hasMomentumState();
  torch::Tensor header =
      torch::tensor({progress_.epoch, progress_.stepInEpoch, progress_.globalStep, progress_.worldSize,
                     progress_.batchSize, progress_.samplerSeed, static_cast<int64_t>(hadMomentum)},
                    torch::kInt64);
  torch::Tensor generator = at::detail::getDefaultCPUGenerator().get_state();
  StateSync mine;
  mine.completedSteps = fresh ? -1 : progress_.globalStep;
  mine.tensors = [&] {
    std::vector<torch::Tensor> state{header, generator};
    for (auto& p : model_->parameters()) state.push_back(p);
    for (auto& b : model_->buffers()) state.push_back(b);
    for (auto& m : optimizer_->momentumBuffers()) state.push_back(m);
    return state;
  };
  mine.positionTensors = 2;  // the header and the generator
  mine.loaded = [&] {
    const auto* h = header.data_ptr<int64_t>();
    progress_.epoch = h[0];
    progress_.stepInEpoch = h[1];
    progress_.globalStep = h[2];
    progress_.worldSize = h[3];
    progress_.batchSize = h[4];
    progress_.samplerSeed = h[5];
    at::Generator cpu = at::detail::getDefaultCPUGenerator();  // shares the global generator
    cpu.set_state(generator);
  };
  const int source = syncTrainingState(comm_, mine);
  if (header[6].item<int64_t>() == 0) optimizer_->dropMomentumState();  // the sender had not stepped yet
  if (comm_.rank() == source) replacer_->markFormed();
  if (recordedStep_) recordedStep_->reset();  // recorded against the momentum state and group before the exchange
  firstStepAfterJoin_ = true;
  spdlog::info(
      "rank {} (pid {}): generation {} formed ({} ranks); training goes on from global step {} (state of "
      "rank {})",
      comm_.rank(), ::getpid(), replacer_->generation(), comm_.worldSize(), progress_.globalStep, source);
}

TrainResult Trainer::trainToEnd() {
  TrainResult result;
  while (progress_.epoch < options_.epochs) {
    if (!trainEpoch()) {
      checkpoint();
      result.progress = progress_;
      return result;
    }
    synchronize(comm_.device());  // the epoch's train time includes the GPU's queued steps
    const double evalStart = monotonicSeconds();
    reportProgress("eval");
    Evaluation eval = evaluate();
    reportProgress("train");
    const double now = monotonicSeconds();
    const double trainSeconds = evalStart - epochStart_;
    const double trainLoss = epochSteps_ > 0 ? epochLoss_.item<double>() / epochSteps_ : 0.0;
    if (comm_.rank() == 0) {
      spdlog::info(
          "epoch {}/{} done: train loss {:.4f}, test loss {:.4f}, test accuracy {:.2f}% ({} images), "
          "{:.0f} samples/s, train {:.2f}s, eval {:.2f}s",
          progress_.epoch + 1, options_.epochs, trainLoss, eval.loss, eval.accuracy * 100, eval.samples,
          epochSamples_ / std::max(trainSeconds, 1e-9), trainSeconds, now - evalStart);
      metrics_.write({{"type", "epoch"},
                      {"epoch", progress_.epoch + 1},
                      {"global_step", progress_.globalStep},
                      {"train_loss", trainLoss},
                      {"test_loss", eval.loss},
                      {"test_accuracy", eval.accuracy},
                      {"test_samples", eval.samples},
                      {"samples_per_s", epochSamples_ / std::max(trainSeconds, 1e-9)},
                      {"train_time_s", trainSeconds},
                      {"host_ms_per_step", epochHostSeconds_ * 1e3 / std::max<int64_t>(epochSteps_, 1)},
                      {"eval_time_s", now - evalStart},
                      {"world_size", comm_.worldSize()}});
    }
    result.lastEvaluation = eval;
    result.lastEvaluation.epoch = progress_.epoch + 1;
    ++progress_.epoch;
    progress_.stepInEpoch = 0;
    checkpoint();
  }
  result.progress = progress_;
  return result;
}

bool Trainer::trainEpoch() {
  DistributedSampler sampler(data_.train.size(), comm_.worldSize(), comm_.rank(), true,
                             static_cast<uint64_t>(progress_.samplerSeed), options_.dropLast);
  sampler.setEpoch(progress_.epoch);
  const torch::Tensor indices = toDeviceAsync(torch::tensor(sampler.indices(), torch::kInt64), comm_.device());
  const int64_t numSamples = sampler.numSamples();
  const int64_t stepsPerEpoch = ceilDiv(numSamples, options_.batchSize);
  model_->train();
  epochStart_ = intervalStart_ = monotonicSeconds();
  epochSamples_ = intervalSamples_ = 0;
  epochSteps_ = intervalSteps_ = 0;
  epochHostSeconds_ = 0;
  // Loss sums stay on the device: reading a CUDA loss every step would stall the host on each step.
  epochLoss_.zero_();
  intervalLoss_.zero_();
  while (progress_.stepInEpoch < stepsPerEpoch) {
    if (options_.maxSteps > 0 && progress_.globalStep >= options_.maxSteps) return false;
    const double stepStart = monotonicSeconds();
    faults_.beforeStep(progress_.globalStep);
    const int64_t begin = progress_.stepInEpoch * options_.batchSize;
    const double waited = trainStep(indices.narrow(0, begin, std::min(options_.batchSize, numSamples - begin)));
    epochHostSeconds_ += monotonicSeconds() - stepStart;
    // What ddprun compares between ranks: in lockstep every rank takes as long per step, but only the one
    // that holds the others up is busy for all of it.
    busySeconds_ += monotonicSeconds() - stepStart - waited;
    if (!firstStepLogged_ && comm_.rank() == 0 && env_.commGeneration == 0) {
      // The moment training is back after a restart (ddprun's restart benchmark reads it).
      spdlog::info("first training step of attempt {} done (global step {})", env_.restartCount, progress_.globalStep);
    }
    if (firstStepAfterJoin_ && (env_.commGeneration > 0 || comm_.rank() == 0)) {
      // The moment training is back after a rank replacement (tools/bench/recovery.sh reads it).
      spdlog::info("rank {}: first training step of generation {} done (global step {})", comm_.rank(),
                   replacer_->generation(), progress_.globalStep);
    }
    firstStepLogged_ = true;
    firstStepAfterJoin_ = false;
    ++progress_.stepInEpoch;
    ++progress_.globalStep;
    reportProgress("train");
    if (const int warning = takeWarningSignal(); warning != 0) {
      spdlog::info("received {} (a scheduler's warning): carrying on; the last checkpoint is {} step(s) old",
                   warning == SIGUSR1 ? "SIGUSR1" : "SIGUSR2",
                   options_.checkpointEvery > 0 ? std::to_string(progress_.globalStep % options_.checkpointEvery)
                                                : "up to an epoch's");
    }
    if (intervalSteps_ >= options_.logEvery || progress_.stepInEpoch == stepsPerEpoch) logInterval(stepsPerEpoch);
    if (options_.checkpointEvery > 0 && progress_.globalStep % options_.checkpointEvery == 0 &&
        progress_.stepInEpoch < stepsPerEpoch) {
      checkpoint();
    }
  }
  return true;
}

double Trainer::trainStep(const torch::Tensor& batchIndices) {
  double waited = 0;
  if (recordedStep_ && recordedStep_->takes(batchIndices.size(0))) {
    const bool wasRecorded = recordedStep_->recorded();
    waited = recordedStep_->run(batchIndices);
    if (!wasRecorded && recordedStep_->recorded() && comm_.rank() == 0) {
      spdlog::info("training step recorded for replay after {} eager warm-up steps (global step {})",
                   RecordedStep::kWarmUps, progress_.globalStep);
    }
  } else {  // eager, and an epoch's last, smaller batch under a recorder
    backwardPass(data_.train.images.index_select(0, batchIndices), data_.train.labels.index_select(0, batchIndices));
    waited = reduceGradients();
    optimizer_->step();
  }
  samplesThisRun_ += batchIndices.size(0);
  const int64_t globalSamples = batchIndices.size(0) * comm_.worldSize();
  intervalSamples_ += globalSamples;
  epochSamples_ += globalSamples;
  ++intervalSteps_;
  ++epochSteps_;
  return waited;
}

void Trainer::backwardPass(const torch::Tensor& images, const torch::Tensor& labels) {
  optimizer_->zeroGrad();
  if (reducer_) reducer_->prepareForBackward();
  torch::Tensor loss;
  {
    AutocastScope autocast(comm_.device(), options_.amp);  // forward and loss only, as torch.autocast is used
    loss = torch::nn::functional::cross_entropy(model_->forward(images), labels);
  }
  loss.backward();
  intervalLoss_ += loss.detach().to(torch::kFloat64);  // folded into epochLoss_ once per interval
}

double Trainer::reduceGradients() {
  if (!reducer_) return 0;
  return secondsIn([this] { reducer_->finishBackward(); });
}

void Trainer::logInterval(int64_t stepsPerEpoch) {
  // Reading the loss first waits, on CUDA, for the interval's queued steps, so the rate is real.
  const double lossSum = intervalLoss_.item<double>();
  checkLossIsFinite(lossSum);
  const double loss = lossSum / intervalSteps_;
  const double now = monotonicSeconds();
  if (comm_.rank() == 0) {
    const double rate = intervalSamples_ / std::max(now - intervalStart_, 1e-9);
    const int64_t stepsLeft =
        (options_.epochs - progress_.epoch - 1) * stepsPerEpoch + (stepsPerEpoch - progress_.stepInEpoch);
    const double stepRate = intervalSteps_ / std::max(now - intervalStart_, 1e-9);
    const double eta = stepsLeft / std::max(stepRate, 1e-9);
    spdlog::info("epoch {}/{} step {}/{} loss {:.4f} {:.0f} samples/s eta {:.1f}s", progress_.epoch + 1,
                 options_.epochs, progress_.stepInEpoch, stepsPerEpoch, loss, rate, eta);
    metrics_.write({{"type", "interval"},
                    {"epoch", progress_.epoch + 1},
                    {"step", progress_.stepInEpoch},
                    {"steps_per_epoch", stepsPerEpoch},
                    {"global_step", progress_.globalStep},
                    {"loss", loss},
                    {"samples_per_s", rate},
                    {"interval_time_s", now - intervalStart_},
                    {"eta_s", eta}});
  }
  epochLoss_ += intervalLoss_;
  intervalLoss_.zero_();
  intervalSteps_ = 0;
  intervalSamples_ = 0;
  intervalStart_ = now;
}

Evaluation Trainer::evaluate() {
  torch::NoGradGuard noGrad;
  model_->eval();
  const int64_t n = data_.test.size();
  const torch::Tensor mine = torch::arange(comm_.rank(), n, comm_.worldSize(),
                                           torch::TensorOptions().dtype(torch::kInt64).device(comm_.device()));
  AutocastScope autocast(comm_.device(), options_.amp);
  // [loss sum, correct, count] in float64 so the sums are exact across ranks.
  torch::Tensor totals = torch::zeros({3}, torch::TensorOptions().dtype(torch::kFloat64).device(comm_.device()));
  for (int64_t begin = 0; begin < mine.size(0); begin += kEvalBatch) {
    const torch::Tensor idx = mine.narrow(0, begin, std::min(kEvalBatch, mine.size(0) - begin));
    const torch::Tensor logits = model_->forward(data_.test.images.index_select(0, idx));
    const torch::Tensor labels = data_.test.labels.index_select(0, idx);
    totals[0] += torch::nn::functional::cross_entropy(
                     logits, labels, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                     .to(torch::kFloat64);
    totals[1] += logits.argmax(1).eq(labels).sum().to(torch::kFloat64);
    totals[2] += static_cast<double>(idx.size(0));
  }
  comm_.allreduceSum(totals);
  totals = totals.cpu();
  model_->train();
  Evaluation eval;
  eval.samples = static_cast<int64_t>(totals[2].item<double>());
  eval.loss = totals[0].item<double>() / std::max<int64_t>(eval.samples, 1);
  eval.accuracy = totals[1].item<double>() / std::max<int64_t>(eval.samples, 1);
  return eval;
}

void Trainer::checkpoint() {
  if (options_.checkpointDir.empty()) return;
  // Every rank reports the phase: the others wait for rank 0's write at the barrier below.
  reportProgress("checkpoint");
  if (comm_.rank() == 0) {
    checkLossIsFinite(intervalLoss_.item<double>());
    checkParametersAreFinite();
    const std::string path = saveCheckpoint(options_.checkpointDir, *model_, *optimizer_, progress_);
    spdlog::debug("checkpoint written: {}", path);
  }
  comm_.barrier();
  reportProgress("train");
}

void Trainer::checkLossIsFinite(double intervalLossSum) const {
  if (std::isfinite(intervalLossSum)) return;
  throw TrainingDiverged("the loss became " + std::string(std::isnan(intervalLossSum) ? "NaN" : "infinite") +
                         " on rank " + std::to_string(comm_.rank()) + " in the steps up to global step " +
                         std::to_string(progress_.globalStep) + ": training diverged (try a lower --lr)");
}

void Trainer::checkParametersAreFinite() const {
  for (const auto& item : model_->named_parameters()) {
    if (!torch::isfinite(item.value()).all().item<bool>()) {
      throw TrainingDiverged("parameter " + item.key() + " is not finite after global step " +
                             std::to_string(progress_.globalStep) +
                             ": training diverged (try a lower --lr); no checkpoint written");
    }
  }
}

}  // namespace ddprun::worker
