// The training loop in process, its ranks as threads (support/thread_ranks.hpp) on a small synthetic data
// set: the progress it reports (steps, samples, phases around evaluation and checkpoints) and the stop on a
// non-finite loss. Real processes and data are worker_integration_test's.
#include <gtest/gtest.h>

#include <filesystem>
#include <mutex>

#include "support/child_process.hpp"
#include "support/model_compare.hpp"
#include "support/rerun_recorder.hpp"
#include "support/thread_ranks.hpp"
#include "worker/trainer.hpp"

namespace ddprun::worker {
namespace {
namespace fs = std::filesystem;
using test::spawnRanks;
using test::ThreadCommunicator;
using test::ThreadGroup;

/// `n` random images with labels 0..9 (a fixed generator: the rank threads share the global one).
Split syntheticSplit(int64_t n, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  return {torch::randn({n, 1, 28, 28}, gen), torch::randint(0, 10, {n}, gen, torch::kInt64)};
}

Dataset syntheticData() { return {syntheticSplit(200, 1), syntheticSplit(50, 2), "synthetic", false}; }

WorkerOptions smallRun(const std::string& checkpointDir) {
  WorkerOptions options;
  options.batchSize = 16;
  options.epochs = 1;
  options.logEvery = 1000;
  options.checkpointDir = checkpointDir;
  options.checkpointEvery = 3;
  return options;
}

struct Report {
  int64_t step;
  int64_t samples;
  std::string phase;
  bool operator==(const Report& o) const { return step == o.step && samples == o.samples && phase == o.phase; }
};
std::ostream& operator<<(std::ostream& out, const Report& r) {
  return out << r.step << "/" << r.samples << "/" << r.phase;
}

TEST(Trainer, ReportsEveryStepAndThePhasesAroundEvaluationAndCheckpoints) {
  constexpr int kRanks = 2;
  const std::string dir = test::makeTempDir("trainer");
  ThreadGroup group(kRanks);
  std::vector<std::vector<Report>> reports(kRanks);
  std::vector<std::shared_ptr<Classifier>> models;
  for (int r = 0; r < kRanks; ++r) models.push_back(makeModel("mlp"));
  spawnRanks(kRanks, [&](int rank) {
    DistEnv env;
    env.rank = rank;
    env.worldSize = kRanks;
    ThreadCommunicator comm(group, rank);
    Trainer trainer(smallRun(dir), env, comm, syntheticData(), models[rank], [&reports, rank](const ProgressRecord& r) {
      reports[rank].push_back({r.step, r.samples.value_or(-1), r.phase});
    });
    trainer.run();
  });
  // 200 samples over 2 ranks: 100 each, 7 steps of 16 (the last of 4); checkpoints after steps 3 and 6
  // (--checkpoint-every 3) and at the epoch's end, after its evaluation.
  const std::vector<Report> expected{
      {0, 0, "train"},       {1, 16, "train"},      {2, 32, "train"},       {3, 48, "train"},
      {3, 48, "checkpoint"}, {3, 48, "train"},      {4, 64, "train"},       {5, 80, "train"},
      {6, 96, "train"},      {6, 96, "checkpoint"}, {6, 96, "train"},       {7, 100, "train"},
      {7, 100, "eval"},      {7, 100, "train"},     {7, 100, "checkpoint"}, {7, 100, "train"}};
  for (int rank = 0; rank < kRanks; ++rank) EXPECT_EQ(reports[rank], expected) << "rank " << rank;
  fs::remove_all(dir);
}

TEST(Trainer, ANonFiniteLossStopsTrainingOnEveryRank) {
  constexpr int kRanks = 2;
  ThreadGroup group(kRanks);
  std::vector<std::string> errors(kRanks);
  std::vector<std::shared_ptr<Classifier>> models;
  for (int r = 0; r < kRanks; ++r) {
    models.push_back(makeModel("mlp"));
    torch::NoGradGuard noGrad;
    models.back()->parameters()[0].view(-1)[5] = std::numeric_limits<float>::quiet_NaN();
  }
  spawnRanks(kRanks, [&](int rank) {
    DistEnv env;
    env.rank = rank;
    env.worldSize = kRanks;
    ThreadCommunicator comm(group, rank);
    WorkerOptions options = smallRun("");
    options.logEvery = 2;
    Trainer trainer(options, env, comm, syntheticData(), models[rank]);
    try {
      trainer.run();
    } catch (const TrainingDiverged& e) {
      errors[rank] = e.what();
    }
  });
  for (int rank = 0; rank < kRanks; ++rank) {
    EXPECT_NE(errors[rank].find("the loss became NaN on rank " + std::to_string(rank) +
                                " in the steps up to global step 2: training diverged"),
              std::string::npos)
        << errors[rank];
  }
}

using test::firstDifference;
using test::RerunRecorder;

/// Trains `ranks` thread ranks (a group, as with --backend) on the synthetic data from the same initial model, with
/// or without a RerunRecorder per rank, and returns rank 0's parameters at the end.
std::vector<torch::Tensor> trainRanks(const WorkerOptions& options, bool recorded,
                                      std::vector<RerunRecorder::Counts>* counts = nullptr, int ranks = 2) {
  ThreadGroup group(ranks);
  torch::manual_seed(7);
  std::vector<std::shared_ptr<Classifier>> models;
  for (int r = 0; r < ranks; ++r) models.push_back(makeModel(options.model));
  std::vector<RerunRecorder::Counts> rankCounts(ranks);
  spawnRanks(ranks, [&](int rank) {
    DistEnv env;
    env.rank = rank;
    env.worldSize = ranks;
    ThreadCommunicator comm(group, rank);
    Trainer trainer(options, env, comm, syntheticData(), models[rank]);
    if (recorded) trainer.recordStepsWith(std::make_unique<RerunRecorder>(rankCounts[rank]));
    trainer.run();
  });
  if (counts != nullptr) *counts = rankCounts;
  std::vector<torch::Tensor> params;
  for (const auto& p : models[0]->parameters()) params.push_back(p.detach().clone());
  return params;
}

TEST(Trainer, ARecordedStepTrainsBitEqualToTheEagerOne) {
  for (const auto& [model, amp] : {std::pair<std::string, bool>{"mlp", false}, {"cnn", true}}) {
    SCOPED_TRACE(model + (amp ? " with --amp" : ""));
    WorkerOptions options = smallRun("");
    options.epochs = 2;
    options.model = model;
    options.amp = amp;
    const std::vector<torch::Tensor> eager = trainRanks(options, false);
    std::vector<RerunRecorder::Counts> counts;
    const std::vector<torch::Tensor> recorded = trainRanks(options, true, &counts);
    EXPECT_EQ(firstDifference(eager, recorded), "");
    // Per rank and epoch 7 steps, the last of 4 samples (eager): 3 warm-ups, one recording of two parts, then the
    // 12 - 3 = 9 later full steps replay both parts.
    for (const auto& c : counts) {
      EXPECT_EQ(c.warmUps, 3);
      EXPECT_EQ(c.records, 2);
      EXPECT_EQ(c.replays, 2 * 9);
    }
  }
}

TEST(Trainer, OneRankRecordsItsWholeStepAsOneAndTrainsBitEqualToEager) {
  WorkerOptions options = smallRun("");
  options.epochs = 2;
  const std::vector<torch::Tensor> eager = trainRanks(options, false, nullptr, 1);
  std::vector<RerunRecorder::Counts> counts;
  const std::vector<torch::Tensor> recorded = trainRanks(options, true, &counts, 1);
  EXPECT_EQ(firstDifference(eager, recorded), "");
  // 200 samples in batches of 16: 12 full and one of 8 per epoch; 3 warm-ups, then 24 - 3 = 21 replays of one.
  EXPECT_EQ(counts[0].records, 1);
  EXPECT_EQ(counts[0].replays, 21);
}

TEST(Trainer, CheckpointsOfARecordedRunResumeEagerAndTheReverse) {
  const std::string dir = test::makeTempDir("trainer_graph");
  WorkerOptions options = smallRun(dir);
  options.epochs = 2;
  const std::vector<torch::Tensor> uninterrupted = trainRanks(smallRun(""), false);
  for (const bool recordedFirst : {true, false}) {
    SCOPED_TRACE(recordedFirst ? "recorded, then eager" : "eager, then recorded");
    fs::remove_all(dir);
    WorkerOptions first = options;
    first.maxSteps = 5;  // a checkpoint after step 3 and at the stop
    trainRanks(first, recordedFirst);
    WorkerOptions rest = smallRun(dir);
    const std::vector<torch::Tensor> resumed = trainRanks(rest, !recordedFirst);
    EXPECT_EQ(firstDifference(uninterrupted, resumed), "");
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ddprun::worker
