// ddprun with the real worker: same parameters as the worker's own 2-rank
// run, elastic restart with resume from checkpoint, failure summary, and a hung worker on SIGTERM.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>

#include "common/shm_names.hpp"
#include "support/child_process.hpp"
#include "support/http_test_client.hpp"
#include "support/pty_session.hpp"
#include "support/wait_until.hpp"
#include "support/worker_runs.hpp"
#include "worker/checkpoint.hpp"
#include "worker/models.hpp"

namespace ddprun::worker {
namespace fs = std::filesystem;
using namespace std::chrono_literals;
namespace {

const std::string kDdprun = DDPRUN_BIN;
using test::concat;
using test::maxAbsDiffOfFinalModels;
using test::workerArgs;

class DdprunWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::makeTempDir("ddprun-worker"); }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }
  std::string sub(const std::string& name) const { return dir_ + "/" + name; }
  std::string dir_;
};

TEST_F(DdprunWorkerTest, TrainsToTheSameParametersAsTheWorkersOwnTwoRankRun) {
  const auto args = workerArgs(sub("direct"));
  auto direct = test::runRanks(2, DDPRUN_WORKER_BIN, std::vector<std::string>(args.begin() + 1, args.end()));
  for (const auto& r : direct) ASSERT_EQ(r.exitCode, 0) << r.output;
  auto launched =
      test::runProcess(kDdprun, concat({"--nproc-per-node", "2", "--standalone"}, workerArgs(sub("ddprun"))), {}, 120s);
  ASSERT_EQ(launched.exitCode, 0) << launched.output;
  EXPECT_NE(launched.output.find("[rank0]:"), std::string::npos);
  EXPECT_EQ(maxAbsDiffOfFinalModels(sub("direct"), sub("ddprun")), 0.0);
  // Identical training, identical bytes: the final checkpoints have equal hashes.
  EXPECT_TRUE(test::readFile(listCheckpoints(sub("direct")).at(0)) ==
              test::readFile(listCheckpoints(sub("ddprun")).at(0)))
      << "the final checkpoints of two identical runs differ";
}

/// A 2-rank job over `backend` whose rank 1 fails on attempt 0 restarts, resumes and ends with exactly the
/// parameters of an uninterrupted job.
/// Checks the restart of a job; `token` gets ddprun's launch token (its shared-memory segments' key).
void checkElasticRestart(const std::string& backend, const std::string& dir, std::string* launchToken = nullptr) {
  const std::vector<std::string> job{"--nproc-per-node", "2", "--standalone", "--rdzv-id", "restart-" + backend};
  auto whole = test::runProcess(kDdprun, concat(job, workerArgs(dir + "/whole", {"--checkpoint-every", "10"}, backend)),
                                {}, 120s);
  ASSERT_EQ(whole.exitCode, 0) << whole.output;
  EXPECT_NE(whole.output.find("world size 2, backend " + backend), std::string::npos) << whole.output;
  // Rank 1 dies mid-epoch (step 35 of 71) on attempt 0; the checkpoint of step 30 is the newest.
  auto restarted = test::runProcess(
      kDdprun,
      concat(concat(job, {"--max-restarts", "2", "--stop-timeout", "10"}),
             workerArgs(dir + "/restarted",
                        {"--checkpoint-every", "10", "--fail-at-step", "35", "--fail-rank", "1", "--fail-attempt", "0"},
                        backend)),
      {{"DDPRUN_LOG_LEVEL", "debug"}}, 180s);
  EXPECT_EQ(restarted.exitCode, 0) << restarted.output;
  EXPECT_NE(restarted.output.find("attempt 1: restarted 2 workers"), std::string::npos) << restarted.output;
  EXPECT_NE(restarted.output.find("resumed from"), std::string::npos) << restarted.output;
  EXPECT_NE(restarted.output.find("checkpoint-000000030.pt"), std::string::npos) << restarted.output;
  EXPECT_EQ(maxAbsDiffOfFinalModels(dir + "/whole", dir + "/restarted"), 0.0);
  std::smatch token;
  EXPECT_TRUE(std::regex_search(restarted.output, token, std::regex("launch token ([0-9a-f]+)"))) << restarted.output;
  if (launchToken != nullptr && token.size() > 1) *launchToken = token[1].str();
}

TEST_F(DdprunWorkerTest, ElasticRestartResumesAndEndsLikeAnUninterruptedRun) { checkElasticRestart("gloo", dir_); }

TEST_F(DdprunWorkerTest, ElasticRestartOverShmLeavesNothingInDevShm) {
  std::string token;
  checkElasticRestart("shm", dir_, &token);
  ASSERT_FALSE(token.empty());
  EXPECT_TRUE(removeShmSegments(token).removed.empty()) << "the workers leave no segment behind";
}

/// --restart-scope rank: rank `failRank` of a 2-rank job over `backend` is killed at step 35; only it is replaced,
/// the survivor goes on in the same process from its own state (no checkpoint read), and the job ends with exactly
/// the parameters of an uninterrupted run, nothing left in /dev/shm, and the replacement in attempts.jsonl.
void checkRankReplacement(const std::string& backend, int failRank, const std::string& startMethod,
                          const std::string& dir) {
  const std::vector<std::string> job{"--nproc-per-node", "2", "--standalone", "--rdzv-id", "replace-" + backend};
  auto whole = test::runProcess(kDdprun, concat(job, workerArgs(dir + "/whole", {"--checkpoint-every", "10"}, backend)),
                                {}, 120s);
  ASSERT_EQ(whole.exitCode, 0) << whole.output;
  const std::string failRankText = std::to_string(failRank), survivor = std::to_string(1 - failRank);
  auto replaced = test::runProcess(kDdprun,
                                   concat(concat(job, {"--restart-scope", "rank", "--start-method", startMethod,
                                                       "--max-restarts", "1", "--log-dir", dir + "/logs"}),
                                          workerArgs(dir + "/replaced",
                                                     {"--checkpoint-every", "10", "--fail-at-step", "35", "--fail-rank",
                                                      failRankText, "--fail-mode", "kill"},
                                                     backend)),
                                   {{"DDPRUN_LOG_LEVEL", "debug"}}, 180s);
  ASSERT_EQ(replaced.exitCode, 0) << replaced.output;
  const std::string& out = replaced.output;
  EXPECT_NE(out.find("rank " + failRankText + " is replaced in place"), std::string::npos) << out;
  EXPECT_NE(out.find("communicator generation 1 formed"), std::string::npos) << out;
  EXPECT_EQ(out.find("restarted 2 workers"), std::string::npos) << "the group was not restarted\n" << out;
  EXPECT_EQ(out.find("resumed from"), std::string::npos) << "no checkpoint was read\n" << out;
  if (startMethod == "forkserver") {
    // The worker supports spare ranks: the replacement is the spare ddprun forked ahead, and every spare is gone
    // with the job (the one claimed ended as a rank; one forked after it was killed at the end).
    EXPECT_NE(out.find("(the spare rank) in communicator generation 1"), std::string::npos) << out;
    const std::regex forked("spare rank forked \\(pid ([0-9]+)\\)");
    for (auto it = std::sregex_iterator(out.begin(), out.end(), forked); it != std::sregex_iterator(); ++it) {
      const pid_t spare = std::stoi((*it)[1].str());
      EXPECT_TRUE(::kill(spare, 0) != 0 || test::processState(spare) == 'Z') << "spare " << spare << " is left";
    }
  }
  // The survivor's process lived through it: the same pid failed the step and joined generation 1.
  std::smatch failedAt, joined;
  ASSERT_TRUE(
      std::regex_search(out, failedAt, std::regex("rank " + survivor + " \\(pid ([0-9]+)\\): the group failed")))
      << out;
  ASSERT_TRUE(
      std::regex_search(out, joined, std::regex("rank " + survivor + " \\(pid ([0-9]+)\\): generation 1 formed")))
      << out;
  EXPECT_EQ(failedAt[1].str(), joined[1].str());
  EXPECT_EQ(maxAbsDiffOfFinalModels(dir + "/whole", dir + "/replaced"), 0.0);
  // attempts.jsonl: the replacement on a line of its own, then the one attempt, which succeeded.
  std::vector<nlohmann::json> lines;
  for (const auto& entry : fs::recursive_directory_iterator(dir + "/logs")) {
    if (entry.path().filename() != "attempts.jsonl") continue;
    std::ifstream in(entry.path());
    for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  }
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].value("event", ""), "replacement");
  EXPECT_EQ(lines[0].value("rank", -1), failRank);
  EXPECT_EQ(lines[1].value("reason", ""), "success");
  std::smatch token;
  ASSERT_TRUE(std::regex_search(out, token, std::regex("launch token ([0-9a-f]+)"))) << out;
  EXPECT_TRUE(removeShmSegments(token[1].str()).removed.empty()) << "the workers leave no segment behind";
}

TEST_F(DdprunWorkerTest, RankReplacementOverShmKeepsTheSurvivorAndEndsLikeAnUninterruptedRun) {
  checkRankReplacement("shm", 1, "spawn", dir_);
}

TEST_F(DdprunWorkerTest, RankReplacementOverGlooOfRankZeroFromTheForkserverEndsLikeAnUninterruptedRun) {
  checkRankReplacement("gloo", 0, "forkserver", dir_);
}

TEST_F(DdprunWorkerTest, AnotherUsersShmSegmentAnnouncementCannotTurnAReplacementIntoAGroupRestart) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root, to run a client as another user (CI runs as root)";
  // Rank 0, its node's segment leader, is killed at step 35. In generation 1 the survivor, rank 1, reads the new
  // segment's announcement as soon as the key exists; another local user writes one there before the job gets that far.
  test::ChildProcess job(
      kDdprun,
      concat({"--nproc-per-node", "2", "--standalone", "--restart-scope", "rank", "--max-restarts", "1"},
             workerArgs(sub("replaced"), {"--fail-at-step", "35", "--fail-rank", "0", "--fail-mode", "kill"}, "shm")),
      {});
  const std::string listening = "store listening on 127.0.0.1:";
  ASSERT_TRUE(test::waitForOutput(job, listening, 60s)) << job.outputSoFar();
  const std::string shown = job.outputSoFar();
  const size_t at = shown.find(listening) + listening.size();
  const std::string port = shown.substr(at, shown.find_first_not_of("0123456789", at) - at);
  const std::string segment = "//worker/attempt_0/generation_1/default_pg/shm/segment/0";
  auto nobody = test::runProcess("/usr/bin/setpriv",
                                 {"--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c",
                                  test::readFile(DDPRUN_SOURCE_DIR "/tests/scripts/foreign_store_writer.py"), port,
                                  segment, "--value", "/evil 4096 1"},
                                 {}, 60s);
  EXPECT_EQ(nobody.output, "refused\n");
  auto r = job.wait(180s);
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_NE(r.output.find("refused: a client of uid 65534 wrote '" + segment + "'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 0 is replaced in place"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("communicator generation 1 formed"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("restarted 2 workers"), std::string::npos) << "the group was not restarted\n" << r.output;
}

TEST_F(DdprunWorkerTest, WithRankReplacementAHungRankAloneIsKilledAndReplacedAndTheJobEndsLikeAnUninterruptedRun) {
  // Rank 1 hangs (paused by the fault injector) at step 30; rank 0 waits for it in the gradients' allreduce. The
  // evidence names rank 1 alone, so only it is killed and replaced; rank 0 goes on in its own process.
  const std::vector<std::string> job{"--nproc-per-node",   "2", "--standalone", "--rdzv-id", "hang-replace",
                                     "--hang-min-timeout", "2"};
  auto whole = test::runProcess(kDdprun, concat(job, workerArgs(sub("whole"), {"--checkpoint-every", "10"})), {}, 120s);
  ASSERT_EQ(whole.exitCode, 0) << whole.output;
  auto hung = test::runProcess(kDdprun,
                               concat(concat(job, {"--restart-scope", "rank", "--start-method", "forkserver",
                                                   "--max-restarts", "1", "--log-dir", sub("logs")}),
                                      workerArgs(sub("hung"), {"--checkpoint-every", "10", "--fail-at-step", "30",
                                                               "--fail-rank", "1", "--fail-mode", "hang"})),
                               {}, 180s);
  ASSERT_EQ(hung.exitCode, 0) << hung.output;
  const std::string& out = hung.output;
  EXPECT_NE(out.find("hang: no rank has stepped for"), std::string::npos) << out;
  EXPECT_NE(out.find("hang: only rank 1 holds the others up; killing it alone"), std::string::npos) << out;
  EXPECT_NE(out.find("rank 1 is replaced in place"), std::string::npos) << out;
  EXPECT_NE(out.find("communicator generation 1 formed"), std::string::npos) << out;
  EXPECT_EQ(out.find("restarted 2 workers"), std::string::npos) << "the group was not restarted\n" << out;
  EXPECT_EQ(out.find("resumed from"), std::string::npos) << "no checkpoint was read\n" << out;
  std::smatch failedAt, joined;
  ASSERT_TRUE(std::regex_search(out, failedAt, std::regex("rank 0 \\(pid ([0-9]+)\\): the group failed"))) << out;
  ASSERT_TRUE(std::regex_search(out, joined, std::regex("rank 0 \\(pid ([0-9]+)\\): generation 1 formed"))) << out;
  EXPECT_EQ(failedAt[1].str(), joined[1].str()) << "rank 0 kept its process";
  EXPECT_EQ(maxAbsDiffOfFinalModels(sub("whole"), sub("hung")), 0.0);
  // attempts.jsonl: the replacement, named a hang, then the one attempt's success.
  std::vector<nlohmann::json> lines;
  for (const auto& entry : fs::recursive_directory_iterator(sub("logs"))) {
    if (entry.path().filename() != "attempts.jsonl") continue;
    std::ifstream in(entry.path());
    for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  }
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].value("event", ""), "replacement");
  EXPECT_EQ(lines[0]["culprits"][0].value("cause", ""), "hang");
  EXPECT_EQ(lines[0]["culprits"][0].value("rank", -1), 1);
  EXPECT_EQ(lines[1].value("reason", ""), "success");
}

/// Rank 1 hangs at step 30 and is replaced after the hang verdict (at least 5 s later); before that the spare ddprun
/// forked when the attempt started gets `signal`. ddprun says `said` and forks the replacement from the template as
/// before; the job ends with an uninterrupted run's parameters.
void checkSpareNotClaimed(int signal, const std::function<std::string(const std::string& pid)>& said,
                          const std::string& dir) {
  const std::vector<std::string> job{"--nproc-per-node",   "2", "--standalone", "--rdzv-id", "spare-gone",
                                     "--hang-min-timeout", "5"};
  auto whole =
      test::runProcess(kDdprun, concat(job, workerArgs(dir + "/whole", {"--checkpoint-every", "10"})), {}, 120s);
  ASSERT_EQ(whole.exitCode, 0) << whole.output;
  test::ChildProcess run(
      kDdprun,
      concat(concat(job, {"--restart-scope", "rank", "--start-method", "forkserver", "--max-restarts", "1"}),
             workerArgs(dir + "/replaced", {"--checkpoint-every", "10", "--fail-at-step", "30", "--fail-rank", "1",
                                            "--fail-mode", "hang"})),
      {{"DDPRUN_LOG_LEVEL", "debug"}});
  ASSERT_TRUE(test::waitForOutput(run, "spare rank forked (pid ", 60s)) << run.outputSoFar();
  std::smatch spare;
  const std::string soFar = run.outputSoFar();
  ASSERT_TRUE(std::regex_search(soFar, spare, std::regex("spare rank forked \\(pid ([0-9]+)\\)")));
  ASSERT_EQ(::kill(std::stoi(spare[1].str()), signal), 0);
  auto result = run.wait(180s);
  ASSERT_EQ(result.exitCode, 0) << result.output;
  const std::string& out = result.output;
  EXPECT_NE(out.find(said(spare[1].str())), std::string::npos) << out;
  EXPECT_NE(out.find("rank 1 is replaced in place"), std::string::npos) << out;
  EXPECT_EQ(out.find("(the spare rank)"), std::string::npos) << "no spare was fit to claim\n" << out;
  EXPECT_NE(out.find("communicator generation 1 formed"), std::string::npos) << out;
  EXPECT_EQ(maxAbsDiffOfFinalModels(dir + "/whole", dir + "/replaced"), 0.0);
}

TEST_F(DdprunWorkerTest, ASpareRankThatDiedBeforeItWasClaimedIsSaidAndTheReplacementIsForkedInstead) {
  checkSpareNotClaimed(
      SIGKILL,
      [](const std::string& pid) {
        return "spare rank (pid " + pid + ") ended before it was claimed (killed by SIGKILL)";
      },
      dir_);
}

TEST_F(DdprunWorkerTest, AStoppedSpareRankIsNotClaimedButKilledAndTheReplacementIsForkedInstead) {
  // Claimed, a stopped spare would hold the new group up until the collective timeout.
  checkSpareNotClaimed(
      SIGSTOP,
      [](const std::string& pid) {
        return "the spare rank (pid " + pid + ") is stopped (SIGSTOP, or a debugger holds it); not claimed";
      },
      dir_);
}

/// The pid of the child of `parent` whose environment holds RANK=`rank`, or -1.
pid_t rankPid(pid_t parent, int rank) {
  const std::string wanted = "RANK=" + std::to_string(rank);
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream status(entry.path() / "status");
    std::string line;
    pid_t ppid = -1;
    while (std::getline(status, line)) {
      if (line.rfind("PPid:", 0) == 0) ppid = std::stoi(line.substr(5));
    }
    if (ppid != parent) continue;
    std::ifstream environ(entry.path() / "environ");
    for (std::string var; std::getline(environ, var, '\0');) {
      if (var == wanted) return std::stoi(name);
    }
  }
  return -1;
}

TEST_F(DdprunWorkerTest, ARankStoppedByAPersonIsNeverTakenForAHang) {
  // kill -STOP (or a debugger) on rank 1 mid-training: its peer waits in a collective, and ddprun's look at the
  // stacks must not make the frozen rank look like one that waits too (it used to: "hang", the group killed).
  test::ChildProcess run(kDdprun,
                         concat({"--nproc-per-node", "2", "--standalone", "--max-restarts", "0"},
                                workerArgs(dir_ + "/ckpt", {"--epochs", "400", "--timeout", "600"})),
                         {});
  ASSERT_TRUE(test::waitForOutput(run, "first training step of attempt 0", 60s)) << run.outputSoFar();
  const pid_t rank1 = rankPid(run.pid(), 1);
  ASSERT_GT(rank1, 0) << run.outputSoFar();
  ASSERT_EQ(::kill(rank1, SIGSTOP), 0);
  // The floor is 5 s: the watch looks (stacks) and judges within about 6 s; give it three floors.
  const bool said = test::waitForOutput(run, "rank 1 is stopped (SIGSTOP, or a debugger holds it)", 20s);
  ::kill(rank1, SIGCONT);
  EXPECT_TRUE(said) << run.outputSoFar();
  run.sendSignal(SIGTERM);
  auto result = run.wait(60s);
  EXPECT_EQ(result.output.find("] hang: "), std::string::npos) << result.output;
  EXPECT_EQ(result.output.find("likely cause of the hang"), std::string::npos) << result.output;
}

TEST_F(DdprunWorkerTest, UnderRankScopeACollectiveThatTimesOutWithNoRankLostRestartsTheGroupAtOnce) {
  // Rank 1 frozen (SIGSTOP, as a debugger or a frozen host holds it): rank 0's collective times out after the
  // worker's --timeout and no rank exited. Replacing rank 0 would only wait for rank 1 again (a second timeout, then
  // another): the group restarts when rank 0 exits, and attempt 1 trains to the end.
  const auto started = std::chrono::steady_clock::now();
  auto run = test::runProcess(kDdprun,
                              concat({"--nproc-per-node", "2", "--standalone", "--rdzv-id", "stopped-rank",
                                      "--restart-scope", "rank", "--max-restarts", "1"},
                                     workerArgs(dir_ + "/ckpt", {"--timeout", "5", "--fail-at-step", "20",
                                                                 "--fail-rank", "1", "--fail-mode", "stop"})),
                              {}, 180s);
  const auto took = std::chrono::steady_clock::now() - started;
  ASSERT_EQ(run.exitCode, 0) << run.output;
  const std::string& out = run.output;
  EXPECT_NE(out.find("restarting the whole worker group instead of replacing rank 0: rank 0 saw a collective of "
                     "generation 0 time out with no rank lost"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("timed out with no rank lost"), std::string::npos) << "the worker says why it exits\n" << out;
  EXPECT_EQ(out.find("replaced by pid"), std::string::npos) << "no replacement was started\n" << out;
  EXPECT_NE(out.find("attempt 1: restarted 2 workers"), std::string::npos) << out;
  // One collective timeout (5 s), not three; generous for a loaded machine.
  EXPECT_LT(took, 90s) << out;
}

TEST_F(DdprunWorkerTest, RankReplacementForAProgramWithoutSupportSaysSoAndRestartsTheGroup) {
  auto run = test::runProcess(
      kDdprun,
      {"--nproc-per-node", "2", "--standalone", "--restart-scope", "rank", "--max-restarts", "1", "--no-python", "sh",
       "-c", "[ \"$TORCHELASTIC_RESTART_COUNT\" = 1 ] || [ \"$RANK\" = 0 ] || exit 3"},
      {}, 60s);
  EXPECT_EQ(run.exitCode, 0) << run.output;
  EXPECT_NE(run.output.find("--restart-scope rank: sh does not support it"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("attempt 1: restarted 2 workers"), std::string::npos) << run.output;
}

TEST_F(DdprunWorkerTest, MoreFailuresThanRestartsNameTheRankAndExitCode) {
  // One failure, no restarts (repeated failures over several attempts: launcher_process_test).
  auto failing =
      test::runProcess(kDdprun,
                       concat({"--nproc-per-node", "2", "--standalone", "--max-restarts", "0", "--stop-timeout", "10"},
                              workerArgs(sub("ck2"), {"--fail-at-step", "5", "--fail-rank", "1"})),
                       {}, 180s);
  EXPECT_EQ(failing.exitCode, 1) << failing.output;
  const auto root = failing.output.find("Root Cause (first observed failure):");
  ASSERT_NE(root, std::string::npos) << failing.output;
  EXPECT_NE(failing.output.find("rank      : 1 (local_rank: 1)", root), std::string::npos) << failing.output;
  // Exit code 1, or SIGTERM when ddprun's stop reached it after its error file while it was still exiting
  // (its peer's "connection closed" exit can be seen first): either way it is the root cause.
  const std::string exitLine = failing.output.substr(failing.output.find("exitcode  :", root), 17);
  EXPECT_TRUE(exitLine == "exitcode  : 1 (pi" || exitLine == "exitcode  : -15 (") << failing.output;
  EXPECT_NE(failing.output.find("InjectedFault: injected failure at step 5 on rank 1 (attempt 0)", root),
            std::string::npos)
      << failing.output;
}

TEST_F(DdprunWorkerTest, AWorkerThatFailsBeforeItsErrorFileIsNamedByItsLastErrorLine) {
  // A flag the worker refuses ends it before it could write an error file: its last error line is the message.
  auto r = test::runProcess(
      kDdprun, concat({"--nproc-per-node", "2", "--standalone"}, workerArgs(sub("ck"), {"--epochs", "0"})), {}, 120s);
  EXPECT_EQ(r.exitCode, 1) << r.output;
  const auto root = r.output.find("Root Cause (first observed failure):");
  ASSERT_NE(root, std::string::npos) << r.output;
  EXPECT_NE(r.output.find("exitcode  : 2 (pid:", root), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("message   : worker: --epochs: ", root), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("wrote no error file", root), std::string::npos) << r.output;
}

TEST_F(DdprunWorkerTest, AHungWorkerIsEndedOnSigtermWithinTheStopTimeout) {
  test::ChildProcess launcher(kDdprun,
                              concat({"--nproc-per-node", "2", "--standalone", "--stop-timeout", "5"},
                                     workerArgs(sub("ck"), {"--epochs", "20", "--fail-at-step", "10", "--fail-rank",
                                                            "1", "--fail-mode", "hang"})),
                              {});
  ASSERT_TRUE(test::waitForOutput(launcher, "hanging at step 10", 120s)) << launcher.outputSoFar();
  ASSERT_TRUE(launcher.running());
  const auto start = std::chrono::steady_clock::now();
  launcher.sendSignal(SIGTERM);
  auto r = launcher.wait(30s);
  EXPECT_FALSE(r.timedOut) << r.output;
  EXPECT_EQ(r.exitCode, 128 + SIGTERM) << r.output;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 6s) << r.output;
  EXPECT_NE(r.output.find("hanging at step 10"), std::string::npos) << r.output;
}

TEST_F(DdprunWorkerTest, ASchedulersWarningSignalReachesTheWorkersWhichCarryOn) {
  // Slurm's `scancel --signal=USR1` (or ddprun forwarding it, as here): SIGUSR1's default action would end every
  // rank and cost a restart.
  test::ChildProcess launcher(
      kDdprun,
      concat({"--nproc-per-node", "2", "--standalone", "--signals-to-handle", "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1"},
             workerArgs(sub("ck"), {"--epochs", "200"})),
      {});
  ASSERT_TRUE(test::waitForOutput(launcher, "first training step of attempt 0", 120s)) << launcher.outputSoFar();
  launcher.sendSignal(SIGUSR1);
  ASSERT_TRUE(test::waitForOutput(launcher, "received SIGUSR1 (a scheduler's warning): carrying on", 60s, 2))
      << launcher.outputSoFar();
  ASSERT_TRUE(launcher.running()) << launcher.outputSoFar();
  launcher.sendSignal(SIGTERM);
  auto r = launcher.wait(60s);
  EXPECT_EQ(r.exitCode, 128 + SIGTERM) << r.output;
  EXPECT_NE(r.output.find("[rank0]:"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("killed by SIGUSR1"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("worker group failed"), std::string::npos) << r.output;
}

TEST_F(DdprunWorkerTest, AHungRankIsFoundWithBothRanksStacksAndTheRestartEndsLikeAnUninterruptedRun) {
  // Rank 1 hangs (the fault injector pauses it) at step 30 of attempt 0, after the checkpoint of step 30;
  // rank 0 waits for it in the gradients' allreduce. The watch finds the hang from the progress files, saves
  // both ranks' stacks and restarts the group, which resumes from the checkpoint.
  const std::vector<std::string> job{"--nproc-per-node",   "2", "--standalone", "--rdzv-id", "hang-job",
                                     "--hang-min-timeout", "2", "--log-dir",    sub("logs")};
  auto whole = test::runProcess(kDdprun, concat(job, workerArgs(sub("whole"), {"--checkpoint-every", "10"})), {}, 120s);
  ASSERT_EQ(whole.exitCode, 0) << whole.output;
  auto hung = test::runProcess(
      kDdprun,
      concat(concat(job, {"--max-restarts", "1", "--stop-timeout", "5"}),
             workerArgs(sub("hung"), {"--checkpoint-every", "10", "--fail-at-step", "30", "--fail-rank", "1",
                                      "--fail-attempt", "0", "--fail-mode", "hang"})),
      {}, 180s);
  ASSERT_EQ(hung.exitCode, 0) << hung.output;
  EXPECT_NE(hung.output.find("hang: no rank has stepped for"), std::string::npos) << hung.output;
  EXPECT_NE(hung.output.find("(last step 30)"), std::string::npos) << hung.output;
  EXPECT_NE(hung.output.find("rank 1's main thread is in pause (C library) under "
                             "ddprun::worker::FaultInjector::beforeStep(long) const (worker)"),
            std::string::npos)
      << hung.output;
  EXPECT_NE(hung.output.find("attempt 1: restarted 2 workers"), std::string::npos) << hung.output;
  std::string run;
  for (const auto& entry : fs::directory_iterator(sub("logs"))) {
    if (entry.path().filename().string().rfind("hang-job_", 0) == 0 &&
        fs::exists(entry.path() / "attempt_0" / "1" / "stacks.txt")) {
      run = entry.path().string();
    }
  }
  ASSERT_FALSE(run.empty()) << "no stacks saved\n" << hung.output;
  const std::string rank0 = test::readFile(run + "/attempt_0/0/stacks.txt");
  const std::string rank1 = test::readFile(run + "/attempt_0/1/stacks.txt");
  EXPECT_NE(rank1.find("FaultInjector::beforeStep"), std::string::npos) << rank1.substr(0, 3000);
  EXPECT_NE(rank0.find("GradientReducer::finishBackward"), std::string::npos) << rank0.substr(0, 3000);
  EXPECT_NE(hung.output.find("main thread in ddprun::worker::FaultInjector::beforeStep"), std::string::npos)
      << hung.output;
  // Both ranks stopped at step 30; the likely cause is the one stuck in its own code, not rank 0 waiting for it.
  EXPECT_NE(hung.output.find("rank 0 waits in a collective (c10d::Work::wait("), std::string::npos) << hung.output;
  EXPECT_NE(hung.output.find("likely cause of the hang: rank 1\n"), std::string::npos) << hung.output;
  EXPECT_EQ(maxAbsDiffOfFinalModels(sub("whole"), sub("hung")), 0.0);
}

TEST_F(DdprunWorkerTest, ASlowRankIsNamedAStragglerAndMarkedOnTheStatusPage) {
  test::ChildProcess ddprun(
      kDdprun,
      concat({"--nproc-per-node", "2", "--standalone", "--straggler-window", "2", "--status-port", "0"},
             workerArgs(sub("slow"), {"--epochs", "3", "--slow-rank", "1", "--slow-step-ms", "20"})),
      {});
  // /status.json marks the straggler while the job runs.
  bool marked = false;
  std::smatch port;
  test::waitUntil(
      [&] {
        if (!ddprun.running()) return true;  // too late: the EXPECT below says so
        const std::string out = ddprun.outputSoFar();
        if (!std::regex_search(out, port, std::regex(R"(status page on http://127\.0\.0\.1:(\d+)/)"))) return false;
        try {
          test::HttpTestClient client("127.0.0.1", static_cast<uint16_t>(std::stoi(port[1])));
          const auto status = nlohmann::json::parse(client.get("/status.json").body);
          marked = status["ranks"].size() == 2 && status["ranks"][1]["straggler"] == true &&
                   status["ranks"][0]["straggler"] == false;
        } catch (const std::exception&) {
          // the job ended between the check and the request
        }
        return marked;
      },
      180s);
  auto r = ddprun.wait(180s);
  EXPECT_TRUE(marked) << "the status page never marked rank 1\n" << r.output;
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1 is a straggler"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("rank 0 is a straggler"), std::string::npos) << r.output;
  // Once per window, never per step: a run of a few seconds warns a few times at most.
  size_t warnings = 0;
  for (size_t at = r.output.find("is a straggler"); at != std::string::npos;
       at = r.output.find("is a straggler", at + 1)) {
    ++warnings;
  }
  EXPECT_LE(warnings, 10u) << r.output;
}

TEST_F(DdprunWorkerTest, RanksForkedFromATemplateTrainAndRestartExactlyAsStartedOnes) {
  // --start-method forkserver: the worker decodes the data once in a template and every rank of both
  // attempts is forked from it; the run ends with exactly the parameters of a normally started,
  // uninterrupted one.
  const std::vector<std::string> job{"--nproc-per-node", "2", "--standalone", "--rdzv-id", "forked"};
  auto whole = test::runProcess(kDdprun, concat(job, workerArgs(sub("whole"), {"--checkpoint-every", "10"})), {}, 120s);
  ASSERT_EQ(whole.exitCode, 0) << whole.output;
  auto forked = test::runProcess(
      kDdprun,
      concat(concat(job, {"--max-restarts", "1", "--start-method", "forkserver"}),
             workerArgs(sub("forked"), {"--checkpoint-every", "10", "--fail-at-step", "35", "--fail-rank", "1",
                                        "--fail-attempt", "0", "--fail-mode", "kill"})),
      {}, 180s);
  ASSERT_EQ(forked.exitCode, 0) << forked.output;
  EXPECT_NE(forked.output.find("template ready"), std::string::npos) << forked.output;
  EXPECT_EQ(forked.output.find("start the normal way"), std::string::npos) << forked.output;
  EXPECT_NE(forked.output.find("first training step of attempt 1"), std::string::npos) << forked.output;
  EXPECT_EQ(maxAbsDiffOfFinalModels(sub("whole"), sub("forked")), 0.0);
}

}  // namespace
}  // namespace ddprun::worker
