// The worker as a user runs it: real processes, real Gloo, real files. DDP equivalence, checkpoint
// resume equivalence, fault injection, bad input, accuracy, and interop with PyTorch's torchrun.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "common/error_file.hpp"
#include "common/shm_names.hpp"
#include "support/child_process.hpp"
#include "support/model_compare.hpp"
#include "support/wait_until.hpp"
#include "worker/checkpoint.hpp"
#include "worker/models.hpp"

namespace ddprun::worker {
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using test::ChildResult;
namespace {

const std::string kWorker = DDPRUN_WORKER_BIN;
const std::string kMnistDir = DDPRUN_SOURCE_DIR "/data/mnist";

std::string describe(const std::vector<ChildResult>& results) {
  std::ostringstream out;
  for (size_t r = 0; r < results.size(); ++r) {
    out << "--- rank " << r << " exit " << results[r].exitCode << " signal " << results[r].signal
        << (results[r].timedOut ? " TIMED OUT" : "") << "\n"
        << results[r].output;
  }
  return out.str();
}

void expectAllSucceeded(const std::vector<ChildResult>& results) {
  for (const auto& r : results) ASSERT_EQ(r.exitCode, 0) << describe(results);
}

std::vector<std::string> withArgs(std::vector<std::string> base, const std::vector<std::string>& extra) {
  base.insert(base.end(), extra.begin(), extra.end());
  return base;
}

/// The model in the newest checkpoint of `dir`.
std::shared_ptr<Classifier> finalModel(const std::string& dir, const std::string& modelName) {
  auto paths = listCheckpoints(dir);
  if (paths.empty()) throw std::runtime_error("no checkpoint in " + dir);
  auto model = makeModel(modelName);
  loadModelFromCheckpoint(paths.front(), *model);
  return model;
}

nlohmann::json lastEpochMetrics(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  nlohmann::json last;
  while (std::getline(in, line)) {
    auto record = nlohmann::json::parse(line);
    if (record["type"] == "epoch") last = record;
  }
  return last;
}

class WorkerTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::makeTempDir("worker"); }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }
  std::string sub(const std::string& name) const { return dir_ + "/" + name; }
  std::vector<std::string> mnistArgs() const { return {"--data-dir", kMnistDir, "--log-every", "1000"}; }
  std::string dir_;
};

// W ranks with batch b must end where 1 process with batch W*b ends over the same samples.
void checkDdpEquivalence(const std::string& model, const std::vector<std::string>& ddpFlags, const std::string& dir,
                         int ranks = 2) {
  const std::vector<std::string> common{"--data-dir",  kMnistDir, "--model", model,  "--max-steps", "20",
                                        "--log-every", "1000",    "--lr",    "0.05", "--momentum",  "0.9"};
  const std::string perRank = std::to_string(32 / ranks);
  auto ddp =
      test::runRanks(ranks, kWorker,
                     withArgs(withArgs(common, {"--batch-size", perRank, "--checkpoint-dir", dir + "/ddp"}), ddpFlags));
  expectAllSucceeded(ddp);
  auto single =
      test::runProcess(kWorker, withArgs(common, {"--batch-size", "32", "--checkpoint-dir", dir + "/single"}));
  ASSERT_EQ(single.exitCode, 0) << single.output;
  auto a = finalModel(dir + "/ddp", model);
  auto b = finalModel(dir + "/single", model);
  EXPECT_LE(test::maxAbsParameterDiff(*a, *b), 1e-5);
  // And training moved the parameters: the comparison is not between two untouched inits.
  auto init = makeModel(model);
  EXPECT_GT(test::maxAbsParameterDiff(*a, *init), 1e-3);
}

TEST_F(WorkerTest, DdpWithOverlappedBucketsEqualsOneProcessWithTheWholeBatch) {
  // A 0.05 MiB cap splits the MLP into two buckets (fc2 + fc1.bias, then fc1.weight).
  checkDdpEquivalence("mlp", {"--bucket-cap-mb", "0.05", "--backend", "shm"}, dir_);
}

TEST_F(WorkerTest, GlooDdpWithoutOverlapEqualsOneProcessWithTheWholeBatch) {
  checkDdpEquivalence("mlp", {"--no-overlap", "--backend", "gloo"}, dir_);
}

TEST_F(WorkerTest, CnnDdpWithManySmallBucketsEqualsOneProcess) {
  checkDdpEquivalence("cnn", {"--bucket-cap-mb", "0.001"}, dir_);
}

TEST_F(WorkerTest, FourShmRanksEqualOneProcessWithTheWholeBatch) {
  checkDdpEquivalence("mlp", {"--backend", "shm", "--bucket-cap-mb", "0.05"}, dir_, 4);
}

TEST_F(WorkerTest, TwoHostsOfTwoRanksReduceThroughShmAndGlooLeadersAsOneProcess) {
  // Four ranks as two "hosts" (GROUP_RANK 0 and 1, LOCAL_WORLD_SIZE 2): shm inside each, Gloo between ranks 0
  // and 2. Batch 8 per rank must end where one process with batch 32 ends.
  const std::vector<std::string> common{"--data-dir",  kMnistDir, "--max-steps",     "20",
                                        "--log-every", "1000",    "--bucket-cap-mb", "0.05"};
  const std::string port = std::to_string(test::freePort());
  std::vector<test::ChildProcess> ranks;
  for (int rank = 0; rank < 4; ++rank) {
    ranks.emplace_back(kWorker, withArgs(common, {"--batch-size", "8", "--checkpoint-dir", sub("ddp")}),
                       std::map<std::string, std::string>{{"RANK", std::to_string(rank)},
                                                          {"WORLD_SIZE", "4"},
                                                          {"LOCAL_RANK", std::to_string(rank % 2)},
                                                          {"LOCAL_WORLD_SIZE", "2"},
                                                          {"GROUP_RANK", std::to_string(rank / 2)},
                                                          {"MASTER_ADDR", "127.0.0.1"},
                                                          {"MASTER_PORT", port},
                                                          {"OMP_NUM_THREADS", "1"}});
  }
  std::vector<ChildResult> results;
  for (auto& r : ranks) results.push_back(r.wait(std::chrono::seconds(120)));
  expectAllSucceeded(results);
  EXPECT_NE(results[0].output.find("world size 4, backend shm+gloo"), std::string::npos) << describe(results);
  auto single = test::runProcess(kWorker, withArgs(common, {"--batch-size", "32", "--checkpoint-dir", sub("single")}));
  ASSERT_EQ(single.exitCode, 0) << single.output;
  EXPECT_LE(test::maxAbsParameterDiff(*finalModel(sub("ddp"), "mlp"), *finalModel(sub("single"), "mlp")), 1e-5);
}

/// The /dev/shm files of run `runId`.
std::vector<std::string> shmFilesOf(const std::string& runId) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(kShmDir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(shmRunPrefix(runId), 0) == 0) names.push_back(name);
  }
  return names;
}

std::string uniqueRunId() { return "wt" + std::to_string(::getpid()) + "-" + std::to_string(test::freePort()); }

TEST_F(WorkerTest, TwoShmRanksTrainBitForBitAsTwoGlooRanksAndLeaveNothingInDevShm) {
  const std::string runId = uniqueRunId();
  const auto args = withArgs(mnistArgs(), {"--max-steps", "20", "--bucket-cap-mb", "0.05"});
  auto shm = test::runRanks(2, kWorker, withArgs(args, {"--backend", "shm", "--checkpoint-dir", sub("shm")}),
                            {{"TORCHELASTIC_RUN_ID", runId}});
  expectAllSucceeded(shm);
  EXPECT_NE(shm[0].output.find("world size 2, backend shm"), std::string::npos) << describe(shm);
  auto gloo = test::runRanks(2, kWorker, withArgs(args, {"--backend", "gloo", "--checkpoint-dir", sub("gloo")}));
  expectAllSucceeded(gloo);
  EXPECT_EQ(test::maxAbsParameterDiff(*finalModel(sub("shm"), "mlp"), *finalModel(sub("gloo"), "mlp")), 0.0);
  EXPECT_TRUE(shmFilesOf(runId).empty());
}

TEST_F(WorkerTest, AShmPeerKilledDuringTrainingIsNamedWithinTheTimeout) {
  // Rank 1 dies by SIGKILL before step 5; rank 0 waits for it in that step's allreduce and must see the death
  // (not its 60 s timeout).
  auto results = test::runRanks(2, kWorker,
                                withArgs(mnistArgs(), {"--backend", "shm", "--timeout", "60", "--fail-at-step", "5",
                                                       "--fail-rank", "1", "--fail-mode", "kill"}),
                                {{"TORCHELASTIC_ERROR_FILE", sub("e.json")}}, std::chrono::seconds(50));
  EXPECT_EQ(results[1].signal, SIGKILL) << describe(results);
  EXPECT_EQ(results[0].exitCode, 1) << describe(results);
  EXPECT_NE(results[0].output.find("backend shm: rank 1 (pid "), std::string::npos) << describe(results);
  EXPECT_NE(results[0].output.find(") exited during allreduce"), std::string::npos) << describe(results);
  auto record = readErrorFile(sub("e.json"));
  ASSERT_TRUE(record.has_value());
  EXPECT_NE(record->message.find("backend shm: rank 1"), std::string::npos) << record->message;
}

TEST_F(WorkerTest, AShmPeerThatHangsFailsItsPeerAfterTheTimeout) {
  auto results = test::runRanks(2, kWorker,
                                withArgs(mnistArgs(), {"--backend", "shm", "--timeout", "3", "--fail-at-step", "5",
                                                       "--fail-rank", "1", "--fail-mode", "hang"}),
                                {}, std::chrono::seconds(15));
  EXPECT_FALSE(results[0].timedOut) << describe(results);
  EXPECT_EQ(results[0].exitCode, 1) << describe(results);
  EXPECT_NE(results[0].output.find("backend shm: rank 1 did not reach allreduce (collective "), std::string::npos)
      << describe(results);
  EXPECT_NE(results[0].output.find("within 3 s (hung, stalled or killed?)"), std::string::npos) << describe(results);
  EXPECT_TRUE(results[1].timedOut) << "rank 1 hangs until killed";
}

TEST_F(WorkerTest, KillingShmRanksAtRandomLeavesNothingInDevShmAfterTheCleanUp) {
  const std::map<std::string, std::string> base{{"WORLD_SIZE", "2"},
                                                {"LOCAL_WORLD_SIZE", "2"},
                                                {"MASTER_ADDR", "127.0.0.1"},
                                                {"OMP_NUM_THREADS", "1"},
                                                {"TORCHELASTIC_RESTART_COUNT", "0"}};
  std::mt19937 random(12345);
  std::vector<std::string> runIds;
  int leftovers = 0;
  for (int round = 0; round < 6; ++round) {
    const std::string runId = uniqueRunId() + "-" + std::to_string(round);
    runIds.push_back(runId);
    auto env = base;
    env["MASTER_PORT"] = std::to_string(test::freePort());
    env["TORCHELASTIC_RUN_ID"] = runId;
    std::vector<test::ChildProcess> ranks;
    for (int rank = 0; rank < 2; ++rank) {
      env["RANK"] = env["LOCAL_RANK"] = std::to_string(rank);
      // 200 epochs outlast the longest delay below even at the shm backend's speed (one epoch of the carried
      // sample takes about 0.15 s); the survivor ends as soon as its peer dies, so the length costs nothing.
      ranks.emplace_back(kWorker, withArgs(mnistArgs(), {"--backend", "shm", "--timeout", "5", "--epochs", "200"}),
                         env);
    }
    // Anywhere from the start (before the segment exists) to the middle of training.
    std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 2500)(random)));
    const int victim = round % 2;
    ranks[victim].sendSignal(SIGKILL);
    auto survivor = ranks[1 - victim].wait(std::chrono::seconds(30));
    EXPECT_FALSE(survivor.timedOut) << "round " << round << "\n" << survivor.output;
    EXPECT_NE(survivor.exitCode, 0) << "round " << round << "\n" << survivor.output;
    ranks[victim].wait(std::chrono::seconds(5));
    leftovers += static_cast<int>(removeShmSegments(runId).removed.size());
  }
  for (const auto& runId : runIds) EXPECT_TRUE(shmFilesOf(runId).empty()) << runId;
  std::cout << leftovers << " segment(s) of killed groups removed by the clean-up\n";
}

TEST_F(WorkerTest, TheCleanUpRemovesTheSegmentOfARankKilledWhileItsGroupFormed) {
  // Rank 0 of 2 alone: it makes the segment and waits for rank 1 to attach; SIGKILL leaves the segment behind.
  const std::string runId = uniqueRunId();
  test::ChildProcess rank0(kWorker, withArgs(mnistArgs(), {"--backend", "shm", "--timeout", "60"}),
                           {{"WORLD_SIZE", "2"},
                            {"LOCAL_WORLD_SIZE", "2"},
                            {"RANK", "0"},
                            {"LOCAL_RANK", "0"},
                            {"MASTER_ADDR", "127.0.0.1"},
                            {"MASTER_PORT", std::to_string(test::freePort())},
                            {"TORCHELASTIC_RUN_ID", runId},
                            {"TORCHELASTIC_RESTART_COUNT", "4"}});
  for (int i = 0; i < 600 && shmFilesOf(runId).empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto files = shmFilesOf(runId);
  ASSERT_EQ(files.size(), 1u) << "rank 0 should be waiting for its peer with its segment made";
  EXPECT_EQ(files[0].rfind(shmRunPrefix(runId) + "a4-", 0), 0u) << files[0];
  rank0.sendSignal(SIGKILL);
  rank0.wait(std::chrono::seconds(10));
  EXPECT_EQ(shmFilesOf(runId), files) << "a SIGKILLed rank cannot clean up";
  EXPECT_EQ(removeShmSegments(runId, 4).removed, files);
  EXPECT_TRUE(shmFilesOf(runId).empty());
}

TEST_F(WorkerTest, ResumedRunEndsWithTheParametersOfAnUninterruptedRun) {
  const auto args = withArgs(mnistArgs(), {"--epochs", "2", "--checkpoint-every", "25"});
  auto whole = test::runRanks(2, kWorker, withArgs(args, {"--checkpoint-dir", sub("whole")}));
  expectAllSucceeded(whole);

  // Attempt 0: rank 1 fails before global step 90 (epoch 2); the newest checkpoint is step 75.
  const auto interrupted = withArgs(
      args, {"--checkpoint-dir", sub("resumed"), "--fail-at-step", "90", "--fail-rank", "1", "--fail-attempt", "0"});
  auto first = test::runRanks(2, kWorker, interrupted);
  EXPECT_NE(first[1].exitCode, 0) << describe(first);
  EXPECT_EQ(checkpointStep(listCheckpoints(sub("resumed")).front()), 75);
  // Attempt 1: the same command resumes mid-epoch and the fault does not fire again.
  auto second = test::runRanks(2, kWorker, interrupted, {{"TORCHELASTIC_RESTART_COUNT", "1"}});
  expectAllSucceeded(second);
  EXPECT_NE(second[0].output.find("resumed from"), std::string::npos) << describe(second);
  auto a = finalModel(sub("whole"), "mlp");
  auto b = finalModel(sub("resumed"), "mlp");
  EXPECT_EQ(test::maxAbsParameterDiff(*a, *b), 0.0) << "resume is not exact";
}

TEST_F(WorkerTest, ResumeSkipsACorruptNewestCheckpoint) {
  auto run = test::runProcess(kWorker, withArgs(mnistArgs(), {"--max-steps", "10", "--checkpoint-dir", sub("c")}));
  ASSERT_EQ(run.exitCode, 0) << run.output;
  std::ofstream(checkpointPath(sub("c"), 50)) << "torn";
  auto resumed = test::runProcess(kWorker, withArgs(mnistArgs(), {"--max-steps", "12", "--checkpoint-dir", sub("c")}));
  ASSERT_EQ(resumed.exitCode, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("skipping checkpoint"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("checkpoint-000000050.pt"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("global step 10"), std::string::npos) << resumed.output;
}

TEST_F(WorkerTest, ADirectoryNamedLikeALaterCheckpointIsReportedAtStartAndOddEntriesAreWarnedAbout) {
  // The directory used to be skipped without a word, and the run failed only when it reached that step.
  fs::create_directories(checkpointPath(sub("c"), 20));
  ASSERT_EQ(::mkfifo(checkpointPath(sub("c"), 3).c_str(), 0600), 0);
  const auto start = std::chrono::steady_clock::now();
  auto blocked = test::runProcess(
      kWorker, withArgs(mnistArgs(), {"--max-steps", "30", "--checkpoint-every", "10", "--checkpoint-dir", sub("c")}));
  EXPECT_EQ(blocked.exitCode, 2) << blocked.output;
  EXPECT_NE(blocked.output.find("checkpoint-000000020.pt is a directory named like a checkpoint; the checkpoint of "
                                "step 20 must be written under that name"),
            std::string::npos)
      << blocked.output;
  EXPECT_NE(blocked.output.find("checkpoint-000000003.pt is a FIFO named like a checkpoint; skipped"),
            std::string::npos)
      << blocked.output;
  EXPECT_EQ(blocked.output.find("first training step"), std::string::npos)
      << "reported before training, not at step 20";
  EXPECT_LT(std::chrono::steady_clock::now() - start, 60s);
  // One named like a step this run never writes (not a --checkpoint-every multiple, an epoch's end or the stop) is
  // only warned about, as any other stray entry.
  fs::remove(checkpointPath(sub("c"), 20));
  fs::create_directories(checkpointPath(sub("c"), 25));
  fs::create_directories(checkpointPath(sub("c"), 500));
  auto runs = test::runProcess(
      kWorker, withArgs(mnistArgs(), {"--max-steps", "30", "--checkpoint-every", "10", "--checkpoint-dir", sub("c")}));
  EXPECT_EQ(runs.exitCode, 0) << runs.output;
  EXPECT_NE(runs.output.find("checkpoint-000000025.pt is a directory named like a checkpoint; skipped"),
            std::string::npos)
      << runs.output;
  EXPECT_NE(runs.output.find("checkpoint-000000500.pt is a directory named like a checkpoint; skipped"),
            std::string::npos)
      << "past --max-steps\n"
      << runs.output;
  EXPECT_EQ(checkpointStep(listCheckpoints(sub("c")).at(0)), 30);
}

TEST_F(WorkerTest, ACheckpointDirOfAnotherModelStopsInsteadOfStartingOver) {
  auto mlp = test::runProcess(kWorker, withArgs(mnistArgs(), {"--max-steps", "5", "--checkpoint-dir", sub("c")}));
  ASSERT_EQ(mlp.exitCode, 0) << mlp.output;
  auto cnn = test::runProcess(
      kWorker, withArgs(mnistArgs(), {"--model", "cnn", "--max-steps", "5", "--checkpoint-dir", sub("c")}));
  EXPECT_EQ(cnn.exitCode, 1) << cnn.output;
  EXPECT_NE(cnn.output.find("does not fit this model"), std::string::npos) << cnn.output;
  EXPECT_EQ(checkpointStep(listCheckpoints(sub("c")).at(0)), 5) << "the MLP's checkpoint must survive";
}

TEST_F(WorkerTest, AMetricsFileThatIsAFifoIsAFlagErrorAtOnceNotAWaitForAReader) {
  // In a sticky world-writable directory another user made a FIFO at the name: an open for writing used to wait for
  // a reader for ever.
  const std::string fifo = sub("metrics.jsonl");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0666), 0);
  auto r = test::runProcess(kWorker, withArgs(mnistArgs(), {"--max-steps", "2", "--metrics-file", fifo}), {}, 60s);
  EXPECT_FALSE(r.timedOut) << r.output;
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_NE(r.output.find("--metrics-file " + fifo + ": cannot open it for appending: it is a FIFO"), std::string::npos)
      << r.output;
}

TEST_F(WorkerTest, InjectedExitWritesTheTorchelasticErrorFile) {
  const auto args = withArgs(mnistArgs(), {"--fail-at-step", "5", "--fail-rank", "1", "--timeout", "20"});
  auto results = test::runRanks(2, kWorker, args, {{"TORCHELASTIC_ERROR_FILE", sub("error.json")}});
  EXPECT_EQ(results[1].exitCode, 1) << describe(results);
  EXPECT_NE(results[0].exitCode, 0) << "rank 0 must notice its peer is gone\n" << describe(results);
  // Both ranks share the file path here; the rank that failed first writes, the other may overwrite.
  auto record = readErrorFile(sub("error.json"));
  ASSERT_TRUE(record.has_value()) << describe(results);
  EXPECT_NE(results[1].output.find("InjectedFault: injected failure at step 5 on rank 1 (attempt 0)"),
            std::string::npos)
      << describe(results);
}

TEST_F(WorkerTest, InjectedExitRecordsItsMessage) {
  auto result = test::runProcess(kWorker, withArgs(mnistArgs(), {"--fail-at-step", "3"}),
                                 {{"TORCHELASTIC_ERROR_FILE", sub("e.json")}});
  EXPECT_EQ(result.exitCode, 1) << result.output;
  auto record = readErrorFile(sub("e.json"));
  ASSERT_TRUE(record.has_value()) << result.output;
  EXPECT_EQ(record->message, "InjectedFault: injected failure at step 3 on rank 0 (attempt 0)");
}

TEST_F(WorkerTest, FaultActsOnlyOnItsAttempt) {
  auto result = test::runProcess(kWorker, withArgs(mnistArgs(), {"--max-steps", "8", "--fail-at-step", "3"}),
                                 {{"TORCHELASTIC_RESTART_COUNT", "1"}});
  EXPECT_EQ(result.exitCode, 0) << result.output;
}

TEST_F(WorkerTest, InjectedKillDiesBySigkill) {
  auto result = test::runProcess(kWorker, withArgs(mnistArgs(), {"--fail-at-step", "3", "--fail-mode", "kill"}));
  EXPECT_EQ(result.signal, SIGKILL) << result.output;
}

TEST_F(WorkerTest, InjectedHangHangsUntilSignalled) {
  test::ChildProcess child(kWorker, withArgs(mnistArgs(), {"--fail-at-step", "3", "--fail-mode", "hang"}), {});
  ASSERT_TRUE(test::waitForOutput(child, "hanging at step 3", std::chrono::seconds(120))) << child.outputSoFar();
  ASSERT_TRUE(child.running()) << "the worker should hang, not finish";
  child.sendSignal(SIGTERM);
  auto result = child.wait(std::chrono::seconds(10));
  EXPECT_FALSE(result.timedOut);
  EXPECT_EQ(result.signal, SIGTERM) << result.output;
  EXPECT_NE(result.output.find("hanging at step 3"), std::string::npos) << result.output;
}

// NCCL's watchdog reports asynchronous errors by throwing on its own thread; the terminate handler must
// still leave the error file before the process aborts.
TEST_F(WorkerTest, AnExceptionOnABackgroundThreadStillWritesTheErrorFile) {
  auto result = test::runProcess(kWorker, withArgs(mnistArgs(), {"--fail-at-step", "2", "--fail-mode", "thread"}),
                                 {{"TORCHELASTIC_ERROR_FILE", sub("t.json")}});
  EXPECT_EQ(result.signal, SIGABRT) << result.output;
  auto record = readErrorFile(sub("t.json"));
  ASSERT_TRUE(record.has_value()) << result.output;
  EXPECT_EQ(record->message, "RuntimeError: injected failure at step 2 on rank 0 (attempt 0) on a background thread");
}

TEST_F(WorkerTest, AmpTrainsInBf16AndReaches88Percent) {
  auto fp32 = test::runProcess(kWorker, withArgs(mnistArgs(), {"--max-steps", "20", "--checkpoint-dir", sub("f")}));
  auto bf16 =
      test::runProcess(kWorker, withArgs(mnistArgs(), {"--max-steps", "20", "--amp", "--checkpoint-dir", sub("b")}));
  ASSERT_EQ(fp32.exitCode, 0) << fp32.output;
  ASSERT_EQ(bf16.exitCode, 0) << bf16.output;
  EXPECT_NE(bf16.output.find("amp bf16 autocast"), std::string::npos) << bf16.output;
  // bf16 matmuls round differently: the weights must differ a little, not a lot.
  const double diff = test::maxAbsParameterDiff(*finalModel(sub("f"), "mlp"), *finalModel(sub("b"), "mlp"));
  EXPECT_GT(diff, 0.0) << "--amp changed nothing: autocast is not on";
  EXPECT_LT(diff, 0.05);

  auto ddp = test::runRanks(2, kWorker, withArgs(mnistArgs(), {"--amp", "--metrics-file", sub("m.jsonl")}));
  expectAllSucceeded(ddp);
  EXPECT_GE(lastEpochMetrics(sub("m.jsonl"))["test_accuracy"].get<double>(), 0.88) << describe(ddp);
}

// One rank with --backend runs its gradients through the group's buckets (as NCCL x1 does on a GPU); the
// sum over one rank divided by one must leave training exactly as without a group.
TEST_F(WorkerTest, ANamedBackendFormsAGroupForOneRankThatTrainsExactlyAsNone) {
  auto results = test::runRanks(1, kWorker,
                                withArgs(mnistArgs(), {"--backend", "gloo", "--max-steps", "15", "--bucket-cap-mb",
                                                       "0.1", "--checkpoint-dir", sub("g")}));
  expectAllSucceeded(results);
  EXPECT_NE(results[0].output.find("world size 1, backend gloo"), std::string::npos) << describe(results);
  auto plain = test::runRanks(1, kWorker, withArgs(mnistArgs(), {"--max-steps", "15", "--checkpoint-dir", sub("n")}));
  expectAllSucceeded(plain);
  EXPECT_NE(plain[0].output.find("world size 1, backend none"), std::string::npos) << describe(plain);
  EXPECT_EQ(test::maxAbsParameterDiff(*finalModel(sub("g"), "mlp"), *finalModel(sub("n"), "mlp")), 0.0);
}

TEST_F(WorkerTest, CudaRequestsInACpuBuildFailWithOneLine) {
#ifdef DDPRUN_WITH_CUDA
  GTEST_SKIP() << "a CUDA build accepts these flags";
#endif
  for (const std::vector<std::string>& flags : {std::vector<std::string>{"--device", "cuda"}, {"--backend", "nccl"}}) {
    auto result = test::runProcess(kWorker, withArgs(mnistArgs(), flags), {{"TORCHELASTIC_ERROR_FILE", sub("c.json")}});
    EXPECT_EQ(result.exitCode, 2) << result.output;
    auto record = readErrorFile(sub("c.json"));
    ASSERT_TRUE(record.has_value()) << result.output;
    EXPECT_EQ(record->message.rfind("ConfigError: " + flags[0] + " ", 0), 0u) << record->message;
    EXPECT_NE(record->message.find("built without CUDA"), std::string::npos) << record->message;
  }
}

TEST_F(WorkerTest, CudaGraphsOnTheCpuFailWithOneLineAndAutoLeavesTheCpuEager) {
  auto on = test::runProcess(kWorker, withArgs(mnistArgs(), {"--device", "cpu", "--cuda-graph", "on"}),
                             {{"TORCHELASTIC_ERROR_FILE", sub("g.json")}});
  EXPECT_EQ(on.exitCode, 2) << on.output;
  auto record = readErrorFile(sub("g.json"));
  ASSERT_TRUE(record.has_value()) << on.output;
  EXPECT_EQ(record->message.rfind("ConfigError: --cuda-graph on: this rank trains on the CPU", 0), 0u)
      << record->message;
  auto bad = test::runProcess(kWorker, {"--cuda-graph", "sometimes"});
  EXPECT_EQ(bad.exitCode, 2) << bad.output;
  EXPECT_NE(bad.output.find("--cuda-graph"), std::string::npos) << bad.output;
  auto automatic = test::runProcess(kWorker, withArgs(mnistArgs(), {"--max-steps", "5"}));
  EXPECT_EQ(automatic.exitCode, 0) << automatic.output;
  EXPECT_EQ(automatic.output.find("recorded for replay"), std::string::npos) << automatic.output;
}

TEST_F(WorkerTest, BadInputGetsAClearError) {
  auto flag = test::runProcess(kWorker, {"--epochs", "zero"});
  EXPECT_EQ(flag.exitCode, 2) << flag.output;
  EXPECT_NE(flag.output.find("--epochs: 'zero' is not a number"), std::string::npos) << flag.output;
  for (const std::vector<std::string>& bad : {std::vector<std::string>{"--lr", "nan"},
                                              {"--timeout", "1e300"},
                                              {"--epochs", "99999999999999999999"},
                                              {"--fail-mode", "explode"}}) {
    auto r = test::runProcess(kWorker, bad);
    EXPECT_EQ(r.exitCode, 2) << bad[0] << " " << bad[1] << "\n" << r.output;
    EXPECT_NE(r.output.find(bad[0]), std::string::npos) << r.output;
  }

  fs::create_directories(sub("bad"));
  fs::copy_file(kMnistDir + "/t10k-labels-idx1-ubyte.gz", sub("bad/t10k-labels-idx1-ubyte.gz"));
  std::ofstream(sub("bad/t10k-images-idx3-ubyte.gz")) << "not gzip, not idx";
  auto data = test::runProcess(kWorker, {"--data-dir", sub("bad")}, {{"TORCHELASTIC_ERROR_FILE", sub("e.json")}});
  EXPECT_EQ(data.exitCode, 1) << data.output;
  EXPECT_NE(data.output.find(sub("bad/t10k-images-idx3-ubyte.gz")), std::string::npos) << data.output;
  auto record = readErrorFile(sub("e.json"));
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->message.rfind("DataError: IDX file", 0), 0u) << record->message;

  auto env = test::runProcess(kWorker, mnistArgs(), {{"WORLD_SIZE", "2"}, {"RANK", "5"}});
  EXPECT_EQ(env.exitCode, 1);
  EXPECT_NE(env.output.find("RANK 5 is outside [0, WORLD_SIZE=2)"), std::string::npos) << env.output;

  auto huge = test::runProcess(kWorker, mnistArgs(), {{"WORLD_SIZE", "99999999999"}});
  EXPECT_EQ(huge.exitCode, 1);
  EXPECT_NE(huge.output.find("WORLD_SIZE=99999999999 is outside the range of an int"), std::string::npos)
      << huge.output;
  // The shm backend's spin knob: a negative or absurd value is one line on each rank, not a silent default.
  auto spin = test::runRanks(2, kWorker, withArgs(mnistArgs(), {"--backend", "shm", "--max-steps", "2"}),
                             {{"DDPRUN_SHM_SPIN_US", "-5"}}, 60s);
  for (const auto& rank : spin) {
    EXPECT_EQ(rank.exitCode, 1) << rank.output;
    EXPECT_NE(rank.output.find("DDPRUN_SHM_SPIN_US=-5 is not a spin time in 0..10000000 microseconds"),
              std::string::npos)
        << rank.output;
  }

  // A level in capitals, as ddprun accepts it (and Python's LOGLEVEL names): it used to silence errors too.
  for (const std::string level : {"INFO", "WARNING", "Error"}) {
    auto upper =
        test::runProcess(kWorker, mnistArgs(), {{"WORLD_SIZE", "2"}, {"RANK", "5"}, {"DDPRUN_LOG_LEVEL", level}});
    EXPECT_NE(upper.output.find("RANK 5 is outside [0, WORLD_SIZE=2)"), std::string::npos) << level << upper.output;
  }
  auto bad = test::runProcess(kWorker, mnistArgs(), {{"WORLD_SIZE", "2"}, {"RANK", "5"}, {"DDPRUN_LOG_LEVEL", "loud"}});
  EXPECT_NE(bad.output.find("DDPRUN_LOG_LEVEL=loud: not a log level"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("RANK 5 is outside"), std::string::npos) << bad.output;
}

// A flag that cannot work in this environment is a usage error (exit 2) found before the data set loads, and
// the error line goes to stderr.
TEST_F(WorkerTest, FlagsThatCannotWorkHereExit2BeforeTheDataLoads) {
  std::ofstream(sub("file")) << "x";
  fs::create_directories(sub("dir"));
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{"--fail-at-step", "3", "--fail-rank", "2"}, "--fail-rank 2 can never fail: WORLD_SIZE is 1"},
      {{"--slow-rank", "1", "--slow-step-ms", "5"}, "--slow-rank 1 does not exist: WORLD_SIZE is 1"},
      {{"--slow-rank", "0"}, "--slow-rank needs a positive --slow-step-ms"},
      {{"--checkpoint-dir", sub("file") + "/sub"}, "--checkpoint-dir " + sub("file") + "/sub: cannot create it"},
      {{"--checkpoint-dir", sub("file")}, "--checkpoint-dir " + sub("file") + ": exists and is not a directory"},
      {{"--metrics-file", sub("dir")}, "--metrics-file " + sub("dir") + ": cannot open it for appending"},
  };
  for (const auto& [flags, message] : cases) {
    auto result = test::runProcess(kWorker, withArgs(mnistArgs(), flags), {{"TORCHELASTIC_ERROR_FILE", sub("e.json")}});
    EXPECT_EQ(result.exitCode, 2) << result.output;
    EXPECT_NE(result.output.find("ConfigError: " + message), std::string::npos) << result.output;
    EXPECT_EQ(result.output.find("data:"), std::string::npos) << "reported only after loading the data\n"
                                                              << result.output;
    auto record = readErrorFile(sub("e.json"));
    ASSERT_TRUE(record.has_value()) << result.output;
    EXPECT_EQ(record->message.rfind("ConfigError: " + message, 0), 0u) << record->message;
  }
  // The error line is on stderr, not stdout.
  const std::string command = kWorker + " --data-dir " + kMnistDir + " --fail-at-step 3 --fail-rank 2";
  auto stdoutOnly = test::runProcess("/bin/sh", {"-c", command + " 2>/dev/null"});
  auto stderrOnly = test::runProcess("/bin/sh", {"-c", command + " >/dev/null"});
  EXPECT_EQ(stdoutOnly.output.find("can never fail"), std::string::npos) << stdoutOnly.output;
  EXPECT_NE(stderrOnly.output.find("can never fail"), std::string::npos) << stderrOnly.output;
}

TEST_F(WorkerTest, AMetricsFileThatTakesNoRecordIsOneErrorLineAndTrainingGoesOn) {
  // /dev/full opens for appending but takes no byte (as a full disk): one line naming it and the reason, once, and
  // the run ends as it would without metrics (two epochs: the second record is not tried again).
  auto run = test::runProcess(kWorker, withArgs(mnistArgs(), {"--epochs", "2", "--metrics-file", "/dev/full"}));
  EXPECT_EQ(run.exitCode, 0) << run.output;
  const std::string line =
      "--metrics-file /dev/full: cannot write a record (No space left on device); training goes "
      "on without metrics";
  ASSERT_NE(run.output.find(line), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find(line), run.output.rfind(line)) << "said once\n" << run.output;
  EXPECT_NE(run.output.find("finished: global step"), std::string::npos) << run.output;
}

TEST_F(WorkerTest, ResumeSkipsACheckpointWhoseBytesChangedAfterItWasWritten) {
  auto run = test::runProcess(
      kWorker, withArgs(mnistArgs(), {"--max-steps", "10", "--checkpoint-every", "5", "--checkpoint-dir", sub("c")}));
  ASSERT_EQ(run.exitCode, 0) << run.output;
  const std::string newest = checkpointPath(sub("c"), 10);
  {
    std::fstream file(newest, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(fs::file_size(newest) / 2));
    file.write("\x7f\xc0\x00\x00", 4);  // a NaN inside fc1's weights
  }
  auto resumed = test::runProcess(kWorker, withArgs(mnistArgs(), {"--max-steps", "12", "--checkpoint-dir", sub("c")}));
  ASSERT_EQ(resumed.exitCode, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("skipping checkpoint: checkpoint " + newest +
                                " is unreadable or corrupt: checksum "
                                "mismatch"),
            std::string::npos)
      << resumed.output;
  EXPECT_NE(resumed.output.find("global step 5"), std::string::npos) << resumed.output;
}

TEST_F(WorkerTest, ANonFiniteLossFailsWithTheErrorFileInsteadOfFinishing) {
  auto result = test::runProcess(
      kWorker,
      {"--data-dir", kMnistDir, "--lr", "1e6", "--max-steps", "30", "--log-every", "5", "--checkpoint-dir", sub("c")},
      {{"TORCHELASTIC_ERROR_FILE", sub("e.json")}});
  EXPECT_EQ(result.exitCode, 1) << result.output;
  auto record = readErrorFile(sub("e.json"));
  ASSERT_TRUE(record.has_value()) << result.output;
  EXPECT_EQ(record->message.rfind("TrainingDiverged: the loss became NaN on rank 0", 0), 0u) << record->message;
  EXPECT_TRUE(listCheckpoints(sub("c")).empty()) << "no checkpoint of a diverged model";
}

TEST_F(WorkerTest, ReportsProgressToTheFileTheLauncherNames) {
  auto result = test::runProcess(kWorker, withArgs(mnistArgs(), {"--max-steps", "7", "--checkpoint-dir", sub("c")}),
                                 {{"DDPRUN_PROGRESS_FILE", sub("progress")}});
  ASSERT_EQ(result.exitCode, 0) << result.output;
  // Line 1: steps; line 2: samples, phase (back in "train" after the last step), busy seconds (the worker's own
  // work, a positive number for 7 real steps).
  std::istringstream in(test::readFile(sub("progress")));
  std::string steps, samples, phase;
  double busySeconds = -1;
  in >> steps >> samples >> phase >> busySeconds;
  EXPECT_EQ(steps, "7");
  EXPECT_EQ(samples, "448");  // 7 steps of 64 samples
  EXPECT_EQ(phase, "train");
  EXPECT_GT(busySeconds, 0.0);
  EXPECT_LT(busySeconds, 60.0);
}

TEST_F(WorkerTest, TheSlowRankHoldsBackItsPeers) {
  // Rank 1 sleeps 60 ms before each of 10 steps; rank 0 waits for it in every allreduce, so rank 0's own
  // epoch time (the metrics file's) is at least 0.6 s.
  auto results = test::runRanks(2, kWorker,
                                {"--data-dir", kMnistDir, "--max-steps", "10", "--slow-rank", "1", "--slow-step-ms",
                                 "60", "--metrics-file", sub("m.jsonl"), "--log-every", "10"});
  expectAllSucceeded(results);
  std::ifstream in(sub("m.jsonl"));
  std::string line;
  ASSERT_TRUE(std::getline(in, line)) << describe(results);
  auto interval = nlohmann::json::parse(line);
  EXPECT_EQ(interval["global_step"], 10);
  EXPECT_GE(interval["interval_time_s"].get<double>(), 0.6) << line;
}

TEST_F(WorkerTest, MissingPeerTimesOutInsteadOfHanging) {
  // World size 2 but only rank 1 starts: the store connection must give up after --timeout.
  auto result = test::runProcess(kWorker, withArgs(mnistArgs(), {"--timeout", "3"}),
                                 {{"WORLD_SIZE", "2"},
                                  {"RANK", "1"},
                                  {"MASTER_ADDR", "127.0.0.1"},
                                  {"MASTER_PORT", std::to_string(test::freePort())}},
                                 std::chrono::seconds(60));
  EXPECT_FALSE(result.timedOut) << result.output;
  EXPECT_EQ(result.exitCode, 1) << result.output;
  EXPECT_NE(result.output.find("could not form the process group of 2 ranks"), std::string::npos) << result.output;
}

TEST_F(WorkerTest, TwoRanksReach88PercentOnTheCarriedMnistSampleInOneEpoch) {
  auto results = test::runRanks(2, kWorker, withArgs(mnistArgs(), {"--metrics-file", sub("m.jsonl")}));
  expectAllSucceeded(results);
  auto epoch = lastEpochMetrics(sub("m.jsonl"));
  ASSERT_FALSE(epoch.is_null()) << test::readFile(sub("m.jsonl"));
  EXPECT_EQ(epoch["test_samples"], 1000);
  EXPECT_GE(epoch["test_accuracy"].get<double>(), 0.88) << epoch.dump();
  EXPECT_EQ(epoch["world_size"], 2);
}

TEST_F(WorkerTest, TwoRanksReach80PercentOnFashionMnistInOneEpoch) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed (tools/setup.sh installs it)";
  }
  auto results = test::runRanks(
      2, kWorker, {"--dataset", "fashion-mnist", "--metrics-file", sub("m.jsonl"), "--log-every", "1000"});
  expectAllSucceeded(results);
  auto epoch = lastEpochMetrics(sub("m.jsonl"));
  ASSERT_FALSE(epoch.is_null());
  EXPECT_EQ(epoch["test_samples"], 10000);
  EXPECT_GE(epoch["test_accuracy"].get<double>(), 0.80) << epoch.dump();
}

// The C++ worker runs unchanged under PyTorch's own launcher, both with the agent's store (static
// rendezvous: TORCHELASTIC_USE_AGENT_STORE=True) and with rank 0 hosting it (--standalone, c10d).
void runUnderTorchrun(const std::vector<std::string>& rdzvArgs, const std::string& dir) {
  std::vector<std::string> args{"-m",
                                "torch.distributed.run",
                                "--nproc_per_node",
                                "2",
                                "--no_python",
                                "--redirects",
                                "1",
                                "--tee",
                                "1",
                                "--monitor_interval",
                                "0.2"};
  args.insert(args.end(), rdzvArgs.begin(), rdzvArgs.end());
  args.insert(args.end(),
              {kWorker, "--data-dir", kMnistDir, "--max-steps", "10", "--checkpoint-dir", dir, "--log-every", "5"});
  auto result = test::runProcess("/usr/bin/python3", args, {}, std::chrono::seconds(120));
  ASSERT_EQ(result.exitCode, 0) << result.output;
  // torchrun's LOCAL_WORLD_SIZE equals WORLD_SIZE: --backend auto takes shared memory.
  EXPECT_NE(result.output.find("world size 2, backend shm"), std::string::npos) << result.output;
  EXPECT_EQ(checkpointStep(listCheckpoints(dir).front()), 10);
}

TEST_F(WorkerTest, RunsUnderTorchrunWithTheAgentStore) {
  runUnderTorchrun({"--master_port", std::to_string(test::freePort())}, sub("static"));
}

TEST_F(WorkerTest, RunsUnderTorchrunStandalone) {
  runUnderTorchrun(
      {"--rdzv_backend", "c10d", "--rdzv_endpoint", "127.0.0.1:" + std::to_string(test::freePort()), "--rdzv_id", "t"},
      sub("c10d"));
}

}  // namespace
}  // namespace ddprun::worker
