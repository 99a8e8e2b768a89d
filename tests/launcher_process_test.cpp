// ddprun with real child processes (small sh scripts and python3-torch scripts): environment, output
// prefixes and log files, restarts, the failure summary, signals, and no orphans after kill -9.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <boost/asio.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "common/shm_names.hpp"
#include "support/child_process.hpp"
#include "support/wait_until.hpp"

namespace ddprun::launcher {
namespace fs = std::filesystem;
using namespace std::chrono_literals;
namespace {

const std::string kDdprun = DDPRUN_BIN;

test::ChildResult ddprun(const std::vector<std::string>& args, std::map<std::string, std::string> env = {},
                         std::chrono::milliseconds timeout = 60s) {
  env.emplace("DDPRUN_PYTHON", "/usr/bin/python3");
  return test::runProcess(kDdprun, args, env, timeout);
}

bool processAlive(int pid) { return ::kill(pid, 0) == 0; }

/// The one run directory "<prefix><random>" ddprun made under `logDir` ("" when there is not exactly one).
std::string onlyRunDir(const std::string& logDir, const std::string& prefix) {
  std::vector<std::string> runs;
  for (const auto& entry : fs::directory_iterator(logDir)) {
    if (entry.path().filename().string().rfind(prefix, 0) == 0) runs.push_back(entry.path().string());
  }
  return runs.size() == 1 ? runs.front() : "";
}

/// The executables of `parent`'s live children (readlink of /proc/<pid>/exe), from /proc/<pid>/stat's ppid field.
std::vector<std::string> childExecutables(int parent) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const auto fields = test::procStatFields(test::readFile(entry.path() / "stat"));
    if (fields.size() < 2) continue;
    if (std::atoi(fields[1].c_str()) != parent || fields[0] == "Z") continue;
    found.push_back(fs::read_symlink(entry.path() / "exe", ec).string());
  }
  return found;
}

std::vector<int> pidsIn(const std::string& file) {
  std::vector<int> pids;
  std::istringstream in(test::readFile(file));
  int pid;
  while (in >> pid) pids.push_back(pid);
  return pids;
}

TEST(Ddprun, GivesEachWorkerTorchrunsEnvironmentAndPrefixesItsLines) {
  auto r = ddprun({"--nproc-per-node", "2", "--standalone", "--rdzv-id", "envtest", "--max-restarts", "1", "sh", "-c",
                   "echo RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE GROUP_RANK=$GROUP_RANK "
                   "ROLE_NAME=$ROLE_NAME LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE RUN=$TORCHELASTIC_RUN_ID "
                   "RESTART=$TORCHELASTIC_RESTART_COUNT MAX=$TORCHELASTIC_MAX_RESTARTS "
                   "AGENT_STORE=$TORCHELASTIC_USE_AGENT_STORE OMP=$OMP_NUM_THREADS MASTER=$MASTER_ADDR:$MASTER_PORT "
                   "ERR=$TORCHELASTIC_ERROR_FILE"},
                  {{"OMP_NUM_THREADS", ""}});
  ASSERT_EQ(r.exitCode, 0) << r.output;
  for (int rank : {0, 1}) {
    const std::string line = "[rank" + std::to_string(rank) + "]:RANK=" + std::to_string(rank) +
                             " LOCAL_RANK=" + std::to_string(rank) +
                             " WORLD_SIZE=2 GROUP_RANK=0 ROLE_NAME=default "
                             "LOCAL_WORLD_SIZE=2 RUN=envtest RESTART=0 MAX=1 AGENT_STORE=True OMP=1 MASTER=127.0.0.1:";
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
  }
  EXPECT_NE(r.output.find("attempt_0/1/error.json"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("setting OMP_NUM_THREADS=1"), std::string::npos) << r.output;
}

TEST(Ddprun, SpareAndForkserverMarkersInItsOwnEnvironmentNeverReachARank) {
  // A shell that exported a rank's variables: every rank used to take itself for a spare and exit 0 untrained.
  auto r = ddprun({"--nproc-per-node", "2", "--standalone", "sh", "-c",
                   "echo \"markers=[${DDPRUN_SPARE_RANK-unset} ${DDPRUN_FORKSERVER_FD-unset}]\""},
                  {{"DDPRUN_SPARE_RANK", "1"}, {"DDPRUN_FORKSERVER_FD", "0"}});
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_NE(r.output.find("[rank0]:markers=[unset unset]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[rank1]:markers=[unset unset]"), std::string::npos) << r.output;
}

TEST(Ddprun, WorkersThatExitBeforeTheirSpawnReturnsAreHandled) {
  // Boost.Process may report such an exit from inside the spawn call itself.
  for (int i = 0; i < 10; ++i) {
    auto r = ddprun({"--nproc-per-node", "8", "--standalone", "--max-restarts", "1", "true"});
    ASSERT_EQ(r.exitCode, 0) << r.output;
    auto f = ddprun({"--nproc-per-node", "8", "--standalone", "--max-restarts", "1", "false"});
    ASSERT_EQ(f.exitCode, 1) << f.output;
  }
}

TEST(Ddprun, AWorkerThatTurnsItsFilesIntoFifosCannotFreezeDdprun) {
  // Rank 0 replaces its progress file and its error file with FIFOs and fails; ddprun used to block in open(2)
  // on the progress FIFO, missing exits, hang detection, the store and the status page until a signal came.
  const std::string script =
      "if [ \"$RANK\" = 0 ]; then echo 1 > \"$DDPRUN_PROGRESS_FILE\"; sleep 0.3; rm -f \"$DDPRUN_PROGRESS_FILE\"; "
      "mkfifo \"$DDPRUN_PROGRESS_FILE\"; mkfifo \"$TORCHELASTIC_ERROR_FILE\"; "
      "sleep 0.5; exit 3; else exec sleep 60; fi";
  const auto start = std::chrono::steady_clock::now();
  auto r = ddprun({"--nproc-per-node", "2", "--standalone", "--monitor-interval", "0.05", "sh", "-c", script});
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s) << r.output;
  EXPECT_EQ(r.exitCode, 1) << r.output;
  EXPECT_NE(r.output.find("exitcode  : 3"), std::string::npos) << r.output;
}

TEST(Ddprun, TwoStandaloneJobsOnOneMachineDoNotCollide) {
  test::ChildProcess a(kDdprun, {"--standalone", "--nproc-per-node", "1", "sh", "-c", "sleep 1; echo $MASTER_PORT"},
                       {});
  test::ChildProcess b(kDdprun, {"--standalone", "--nproc-per-node", "1", "sh", "-c", "sleep 1; echo $MASTER_PORT"},
                       {});
  auto ra = a.wait(30s), rb = b.wait(30s);
  EXPECT_EQ(ra.exitCode, 0) << ra.output;
  EXPECT_EQ(rb.exitCode, 0) << rb.output;
}

TEST(Ddprun, RestartsTheWholeGroupAndSucceedsOnALaterAttempt) {
  // Rank 1 fails on attempt 0 only; rank 0 would run for a minute unless ddprun stops it.
  auto r = ddprun({"--nproc-per-node", "2", "--standalone", "--max-restarts", "2", "--stop-timeout", "5", "sh", "-c",
                   "if [ $TORCHELASTIC_RESTART_COUNT = 0 ]; then if [ $RANK = 1 ]; then exit 3; fi; sleep 60; fi; "
                   "echo done attempt $TORCHELASTIC_RESTART_COUNT"});
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1 (pid"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("exited with code 3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[rank0]:done attempt 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[rank1]:done attempt 1"), std::string::npos) << r.output;
}

TEST(Ddprun, ARestartFirstKillsWhatTheFailedWorkerStarted) {
  const std::string dir = test::makeTempDir("leftover");
  auto r = ddprun({"--nproc-per-node", "2", "--standalone", "--max-restarts", "1", "--stop-timeout", "5", "sh", "-c",
                   "if [ $TORCHELASTIC_RESTART_COUNT = 0 ]; then "
                   "  if [ $RANK = 1 ]; then sleep 60 & echo $! > " +
                       dir +
                       "/child; exit 3; fi; sleep 60; "
                       // A killed orphan may linger as a zombie until init reaps it: only a live process counts.
                       "else c=$(cat " +
                       dir +
                       "/child); "
                       "  if [ -d /proc/$c ] && ! grep -q '^State:.*Z' /proc/$c/status; then echo LEFTOVER; else echo "
                       "CLEAN; fi; fi"});
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_NE(r.output.find("[rank1]:CLEAN"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("LEFTOVER"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

TEST(Ddprun, SummaryListsEveryRankThatFailedOnItsOwn) {
  // Each rank ignores SIGTERM, so each really fails on its own rather than being stopped by ddprun.
  auto r = ddprun({"--nproc-per-node", "3", "--standalone", "sh", "-c", "trap '' TERM; sleep 0.3; exit 3"});
  EXPECT_EQ(r.exitCode, 1) << r.output;
  EXPECT_EQ(r.output.find("<NO_OTHER_FAILURES>"), std::string::npos) << r.output;
  for (int rank : {0, 1, 2}) {
    EXPECT_NE(r.output.find("rank      : " + std::to_string(rank)), std::string::npos) << r.output;
  }
}

TEST(Ddprun, MoreFailuresThanRestartsExitsOneWithASummary) {
  auto r = ddprun({"--nproc-per-node", "2", "--standalone", "--max-restarts", "1", "--stop-timeout", "5", "sh", "-c",
                   "if [ $RANK = 1 ]; then exit 7; fi; sleep 60"});
  EXPECT_EQ(r.exitCode, 1) << r.output;
  const auto root = r.output.find("Root Cause (first observed failure):");
  ASSERT_NE(root, std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank      : 1 (local_rank: 1)", root), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("exitcode  : 7", root), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("<NO_OTHER_FAILURES>"), std::string::npos) << "rank 0 was stopped, not failed\n" << r.output;
  EXPECT_NE(r.output.find("restart 1 of at most"), std::string::npos) << r.output;
}

TEST(Ddprun, SummaryQuotesTheErrorFileAndNamesSignals) {
  auto r = ddprun({"--nproc-per-node", "1", "--standalone", "/usr/bin/python3", "-c",
                   "from torch.distributed.elastic.multiprocessing.errors import record\n"
                   "@record\ndef main():\n    raise ValueError('learning rate is negative')\nmain()"});
  EXPECT_EQ(r.exitCode, 1) << r.output;
  EXPECT_NE(r.output.find("message   : ValueError: learning rate is negative"), std::string::npos) << r.output;
  auto k = ddprun({"--nproc-per-node", "1", "--standalone", "sh", "-c", "kill -SEGV $$"});
  EXPECT_EQ(k.exitCode, 1) << k.output;
  EXPECT_NE(k.output.find("(SIGSEGV)"), std::string::npos) << k.output;
}

TEST(Ddprun, LogDirKeepsTorchrunsLayoutWithRedirectsAndTee) {
  const std::string dir = test::makeTempDir("logs");
  auto r = ddprun({"--nproc-per-node", "2", "--standalone", "--rdzv-id", "job", "--log-dir", dir, "--redirects", "1",
                   "--tee", "0:2", "sh", "-c", "echo out-$RANK; echo err-$RANK >&2"});
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const std::string run = onlyRunDir(dir, "job_");
  ASSERT_FALSE(run.empty()) << r.output;
  for (int rank : {0, 1}) {
    const std::string rankDir = run + "/attempt_0/" + std::to_string(rank);
    EXPECT_EQ(test::readFile(rankDir + "/stdout.log"), "out-" + std::to_string(rank) + "\n");
    EXPECT_EQ(r.output.find("out-" + std::to_string(rank)), std::string::npos) << "redirected stdout on console";
  }
  EXPECT_EQ(test::readFile(run + "/attempt_0/0/stderr.log"), "err-0\n");  // tee: file and console
  EXPECT_NE(r.output.find("[rank0]:err-0"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(run + "/attempt_0/1/stderr.log"));
  EXPECT_NE(r.output.find("[rank1]:err-1"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

TEST(Ddprun, LocalRanksFilterShowsOnlyThoseRanks) {
  auto r =
      ddprun({"--nproc-per-node", "3", "--standalone", "--local-ranks-filter", "1", "sh", "-c", "echo hello-$RANK"});
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_NE(r.output.find("[rank1]:hello-1"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("hello-0"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("hello-2"), std::string::npos) << r.output;
}

TEST(Ddprun, KillDashNineLeavesNoWorkerBehind) {
  const std::string dir = test::makeTempDir("orphans");
  test::ChildProcess launcher(kDdprun,
                              {"--nproc-per-node", "2", "--standalone", "sh", "-c",
                               "echo $$ >> " + dir + "/pids; sleep 120 & echo $! >> " + dir + "/pids; wait"},
                              {});
  EXPECT_TRUE(test::waitUntil([&] { return pidsIn(dir + "/pids").size() >= 4; }, 60s)) << launcher.outputSoFar();
  auto pids = pidsIn(dir + "/pids");
  ASSERT_EQ(pids.size(), 4u) << "workers did not start";
  // The guardian that kills them is ddprun's own ddprun-orphan-guard (beside it in bin/), spawned with the workers.
  const auto children = childExecutables(launcher.pid());
  const fs::path guardian = fs::path(kDdprun).parent_path() / "ddprun-orphan-guard";
  EXPECT_EQ(std::count(children.begin(), children.end(), fs::canonical(guardian).string()), 1)
      << "ddprun's children: " << ::testing::PrintToString(children);
  launcher.sendSignal(SIGKILL);
  launcher.wait(5s);
  // The workers (sh) and the processes they started (sleep) must all be gone, promptly.
  const auto allGone = [&] { return std::none_of(pids.begin(), pids.end(), processAlive); };
  EXPECT_TRUE(test::waitUntil(allGone, 10s));
  for (int pid : pids) EXPECT_FALSE(processAlive(pid)) << "process " << pid << " survived kill -9 of ddprun";
  for (int pid : pids) ::kill(pid, SIGKILL);
  fs::remove_all(dir);
}

/// The empty directories under `dir` (`dir` itself included).
std::vector<std::string> emptyDirsUnder(const std::string& dir) {
  std::vector<std::string> empty;
  std::error_code ec;
  if (fs::is_directory(dir, ec) && fs::is_empty(dir, ec)) empty.push_back(dir);
  for (const auto& entry : fs::recursive_directory_iterator(dir, ec)) {
    if (entry.is_directory(ec) && fs::is_empty(entry.path(), ec)) empty.push_back(entry.path().string());
  }
  return empty;
}

TEST(Ddprun, NeitherKillDashNineNorAFailedStartLeavesEmptyDirectories) {
  const std::string dir = test::makeTempDir("emptydirs");
  // Killed: the orphan guard removes the run's empty directories (attempt_0/0, attempt_0/1) once ddprun is gone.
  test::ChildProcess launcher(kDdprun,
                              {"--nproc-per-node", "2", "--standalone", "--log-dir", dir + "/killed", "sh", "-c",
                               "echo started; exec sleep 120"},
                              {});
  ASSERT_TRUE(test::waitForOutput(launcher, "[rank1]:started", 60s)) << launcher.outputSoFar();
  ASSERT_FALSE(emptyDirsUnder(dir + "/killed").empty()) << "the workers' directories exist while they run";
  launcher.sendSignal(SIGKILL);
  launcher.wait(5s);
  // The run's directory held only empty ones: it goes too, and --log-dir itself (the user's) stays, empty.
  EXPECT_TRUE(test::waitUntil([&] { return fs::is_empty(dir + "/killed"); }, 30s))
      << "left behind by kill -9: " << emptyDirsUnder(dir + "/killed").size() << " empty directories";
  // A start that fails (the store's port is taken) leaves no run directory either.
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor taken(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  auto failed =
      ddprun({"--master-port", std::to_string(taken.local_endpoint().port()), "--log-dir", dir + "/failed", "true"});
  EXPECT_NE(failed.exitCode, 0) << failed.output;
  EXPECT_TRUE(fs::is_empty(dir + "/failed")) << failed.output;
  fs::remove_all(dir);
}

TEST(Ddprun, SigtermIsForwardedAndAHungWorkerIsKilledAfterTheStopTimeout) {
  test::ChildProcess launcher(kDdprun,
                              {"--nproc-per-node", "2", "--standalone", "--stop-timeout", "2", "sh", "-c",
                               "if [ $RANK = 1 ]; then trap '' TERM; fi; echo ready; while :; do sleep 0.1; done"},
                              {});
  ASSERT_TRUE(test::waitForOutput(launcher, "ready", 30s, 2)) << launcher.outputSoFar();  // rank 1's trap is set
  const auto start = std::chrono::steady_clock::now();
  launcher.sendSignal(SIGTERM);
  auto r = launcher.wait(20s);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.exitCode, 128 + SIGTERM) << r.output;
  EXPECT_GE(took, 1900ms) << "rank 1 ignores SIGTERM: ddprun must wait the stop timeout";
  EXPECT_LT(took, 10s);
  EXPECT_NE(r.output.find("sending SIGKILL"), std::string::npos) << r.output;
}

TEST(Ddprun, AStoppedWorkerIsContinuedSoThatItActsOnTheStopSignal) {
  // Rank 1 stops itself (as kill -STOP or a debugger would stop it); ddprun's SIGTERM must not wait the stop timeout
  // (60 s) for it: the stop also continues it, and its default SIGTERM action ends it.
  const std::string dir = test::makeTempDir("stopped-worker");
  // Rank 0 says "ready" once rank 1's state is T (stopped).
  const std::string script = "if [ $RANK = 1 ]; then echo $$ > " + dir + "/pid1; kill -STOP $$; fi; until [ -s " + dir +
                             "/pid1 ] && grep -q '^State:.*T' /proc/$(cat " + dir +
                             "/pid1)/status; do sleep 0.05; done; echo ready; while :; do sleep 0.1; done";
  test::ChildProcess launcher(
      kDdprun, {"--nproc-per-node", "2", "--standalone", "--stop-timeout", "60", "sh", "-c", script}, {});
  ASSERT_TRUE(test::waitForOutput(launcher, "ready", 30s)) << launcher.outputSoFar();
  launcher.sendSignal(SIGTERM);
  auto r = launcher.wait(40s);
  fs::remove_all(dir);
  EXPECT_EQ(r.exitCode, 128 + SIGTERM) << r.output;
  EXPECT_EQ(r.output.find("sending SIGKILL"), std::string::npos) << "rank 1 ended on SIGTERM\n" << r.output;
}

TEST(Ddprun, StockPyTorchScriptRunsWithAndWithoutTheAgentStore) {
  for (const std::vector<std::string>& storeFlags : {std::vector<std::string>{}, {"--no-agent-store"}}) {
    std::vector<std::string> args{"--nproc-per-node", "2", "--standalone"};
    args.insert(args.end(), storeFlags.begin(), storeFlags.end());
    args.push_back(DDPRUN_SOURCE_DIR "/tests/scripts/stock_ddp.py");
    auto r = ddprun(args, {}, 120s);
    EXPECT_EQ(r.exitCode, 0) << r.output;
    EXPECT_NE(r.output.find("[rank0]:stock DDP script: rank 0 of 2 OK"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("[rank1]:stock DDP script: rank 1 of 2 OK"), std::string::npos) << r.output;
  }
}

TEST(DdprunMultiNode, NodesWithDifferentWorkerCountsGetContiguousRanksAndGroupRankZerosStore) {
  // The endpoint is 127.0.0.7, not 127.0.0.1: the host binds exactly that address.
  const std::string endpoint = "127.0.0.7:" + std::to_string(test::freePort());
  auto node = [&](const std::string& addr, const std::string& nproc) {
    return std::vector<std::string>{"--nnodes",
                                    "2",
                                    "--nproc-per-node",
                                    nproc,
                                    "--rdzv-backend",
                                    "c10d",
                                    "--rdzv-endpoint",
                                    endpoint,
                                    "--rdzv-id",
                                    "ranks",
                                    "--local-addr",
                                    addr,
                                    "sh",
                                    "-c",
                                    "echo RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE "
                                    "GROUP=$GROUP_RANK/$GROUP_WORLD_SIZE AGENT_STORE=$TORCHELASTIC_USE_AGENT_STORE "
                                    "MASTER=$MASTER_ADDR"};
  };
  test::ChildProcess second(kDdprun, node("127.0.0.8", "1"), {});
  auto first = ddprun(node("127.0.0.7", "3"));
  auto other = second.wait(60s);
  ASSERT_EQ(first.exitCode, 0) << first.output;
  ASSERT_EQ(other.exitCode, 0) << other.output;
  for (int rank : {0, 1, 2}) {
    const std::string line = "RANK=" + std::to_string(rank) + " LOCAL_RANK=" + std::to_string(rank) +
                             " WORLD_SIZE=4 GROUP=0/2 AGENT_STORE=True MASTER=127.0.0.7";
    EXPECT_NE(first.output.find(line), std::string::npos) << line << "\n" << first.output;
  }
  EXPECT_NE(other.output.find("RANK=3 LOCAL_RANK=0 WORLD_SIZE=4 GROUP=1/2 AGENT_STORE=True MASTER=127.0.0.7"),
            std::string::npos)
      << other.output;
}

TEST(DdprunMultiNode, ANodeAloneTimesOutNamingTheCountsAndASignalEndsTheWait) {
  const std::string endpoint = "127.0.0.1:" + std::to_string(test::freePort());
  auto alone = ddprun({"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-conf",
                       "join_timeout=1", "true"});
  EXPECT_EQ(alone.exitCode, 1) << alone.output;
  EXPECT_NE(alone.output.find("did not complete within join_timeout (1 s): 1 node(s) joined, at least 2 needed"),
            std::string::npos)
      << alone.output;
  test::ChildProcess waiting(kDdprun, {"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "true"},
                             {});
  ASSERT_TRUE(test::waitForOutput(waiting, "rendezvous 'none' on the", 30s)) << waiting.outputSoFar();  // now waiting
  const auto start = std::chrono::steady_clock::now();
  waiting.sendSignal(SIGTERM);
  auto r = waiting.wait(20s);
  EXPECT_EQ(r.exitCode, 128 + SIGTERM) << r.output;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s) << r.output;
}

TEST(DdprunMultiNode, AnotherLocalUserWritesNothingToTheRendezvousStoreOrTheWorkersStore) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root, to run a client as another user (CI runs as root)";
  const std::string dir = test::makeTempDir("ddprun-foreign-writer");
  const std::string rdzvPort = std::to_string(test::freePort());
  // The worker shows its store's port and waits for the test.
  test::ChildProcess job(kDdprun,
                         {"--nnodes", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:" + rdzvPort,
                          "--rdzv-id", "foreign", "--no-python", "sh", "-c",
                          "echo workers_store_port=$MASTER_PORT; while [ ! -e " + dir + "/go ]; do sleep 0.1; done"},
                         {});
  ASSERT_TRUE(test::waitForOutput(job, "workers_store_port=", 60s)) << job.outputSoFar();
  const std::string shown = job.outputSoFar();
  const size_t at = shown.find("workers_store_port=") + std::string("workers_store_port=").size();
  const std::string workersPort = shown.substr(at, shown.find_first_not_of("0123456789", at) - at);
  const std::string writer = test::readFile(DDPRUN_SOURCE_DIR "/tests/scripts/foreign_store_writer.py");
  // The job's end for every node (the rendezvous), and the shm segment a replaced rank's generation would read.
  const std::vector<std::pair<std::string, std::string>> attacks{
      {rdzvPort, "/ddprun.rdzv.foreign/closed"},
      {workersPort, "//worker/attempt_0/generation_1/default_pg/shm/segment/0"}};
  for (const auto& [port, key] : attacks) {
    auto nobody = test::runProcess("/usr/bin/setpriv",
                                   {"--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c",
                                    writer, port, key, "--value", "/evil 4096 1"},
                                   {}, 60s);
    EXPECT_EQ(nobody.output, "refused\n") << key;
  }
  std::ofstream(dir + "/go").close();
  auto r = job.wait(60s);
  EXPECT_EQ(r.exitCode, 0) << r.output;
  for (const auto& [port, key] : attacks) {
    EXPECT_NE(r.output.find("refused: a client of uid 65534 wrote '" + key + "'"), std::string::npos) << r.output;
  }
  fs::remove_all(dir);
}

TEST(DdprunMultiNode, HeartbeatsDoNotWaitForASlowMonitorAndLocalAddrMayBeAName) {
  // Liveness expires after 1 s, the monitor looks only every 3 s: nodes must still be seen alive.
  const std::string endpoint = "127.0.0.1:" + std::to_string(test::freePort());
  auto node = [&](const std::string& addr) {
    return std::vector<std::string>{"--nnodes",
                                    "2",
                                    "--rdzv-backend",
                                    "c10d",
                                    "--rdzv-endpoint",
                                    endpoint,
                                    "--rdzv-conf",
                                    "keep_alive_interval=0.5,keep_alive_max_attempt=2",
                                    "--monitor-interval",
                                    "3",
                                    "--local-addr",
                                    addr,
                                    "sleep",
                                    "5"};
  };
  test::ChildProcess second(kDdprun, node("127.0.0.2"), {});
  auto first = ddprun(node("127.0.0.1"));
  auto other = second.wait(60s);
  EXPECT_EQ(first.exitCode, 0) << first.output;
  EXPECT_EQ(other.exitCode, 0) << other.output;
  EXPECT_EQ(first.output.find("stopped heartbeating"), std::string::npos) << first.output;
  auto named = ddprun({"--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:" + std::to_string(test::freePort()),
                       "--local-addr", "localhost", "sh", "-c", "echo MASTER=$MASTER_ADDR"});
  EXPECT_EQ(named.exitCode, 0) << named.output;
  EXPECT_NE(named.output.find("MASTER=localhost"), std::string::npos) << named.output;
}

TEST(DdprunMultiNode, LocalAddrNamingTheEndpointHostServesTheStoreAndABadOneIsAFlagError) {
  // "localhost" and 127.0.0.1 are the same host: that node serves the store.
  const std::string endpoint = "127.0.0.1:" + std::to_string(test::freePort());
  auto node = [&](const std::string& addr) {
    return std::vector<std::string>{"--nnodes", "2",           "--rdzv-backend",  "c10d",         "--rdzv-endpoint",
                                    endpoint,   "--rdzv-conf", "join_timeout=20", "--local-addr", addr,
                                    "true"};
  };
  test::ChildProcess second(kDdprun, node("127.0.0.2"), {});
  auto first = ddprun(node("localhost"));
  auto other = second.wait(30s);
  EXPECT_EQ(first.exitCode, 0) << first.output;
  EXPECT_EQ(other.exitCode, 0) << other.output;
  EXPECT_NE(first.output.find("hosting the rendezvous store"), std::string::npos) << first.output;
  auto foreign = ddprun({"--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:" + std::to_string(test::freePort()),
                         "--local-addr", "192.0.2.77", "true"});
  EXPECT_EQ(foreign.exitCode, 2) << foreign.output;
  EXPECT_NE(foreign.output.find("--local-addr 192.0.2.77"), std::string::npos) << foreign.output;
}

TEST(DdprunMultiNode, ASignalEndsTheStoreHostsWaitForTheOtherNodesAtTheEndOfTheJob) {
  const std::string endpoint = "127.0.0.1:" + std::to_string(test::freePort());
  auto node = [&](const std::string& addr, const std::string& script) {
    return std::vector<std::string>{"--nnodes",
                                    "2",
                                    "--rdzv-backend",
                                    "c10d",
                                    "--rdzv-endpoint",
                                    endpoint,
                                    "--rdzv-id",
                                    "barrier",
                                    "--local-addr",
                                    addr,
                                    "sh",
                                    "-c",
                                    script};
  };
  // The host's worker is done at once; the other node's runs on, so the host waits for it at the end.
  test::ChildProcess host(kDdprun, node("127.0.0.1", "true"), {});
  test::ChildProcess other(kDdprun, node("127.0.0.2", "echo running; exec sleep 120"), {});
  ASSERT_TRUE(test::waitForOutput(host, "waiting up to", 60s)) << host.outputSoFar() << other.outputSoFar();
  const auto start = std::chrono::steady_clock::now();
  host.sendSignal(SIGTERM);
  auto r = host.wait(20s);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s) << r.output;
  EXPECT_EQ(r.exitCode, 0) << "its workers succeeded\n" << r.output;
  EXPECT_NE(r.output.find("received SIGTERM while ending this node: not waiting for the other nodes any longer"),
            std::string::npos)
      << r.output;
  other.sendSignal(SIGKILL);  // its store is gone; the orphan guard ends its worker
  other.wait(10s);
}

TEST(DdprunMultiNode, ASignalEndsANodeThatIsStillConnectingToTheStore) {
  test::ChildProcess waiting(kDdprun,
                             {"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                              "127.0.0.1:" + std::to_string(test::freePort()), "--rdzv-conf", "is_host=0", "true"},
                             {});
  ASSERT_TRUE(test::waitForOutput(waiting, "connecting to the rendezvous endpoint 127.0.0.1:", 30s))
      << waiting.outputSoFar();
  const auto start = std::chrono::steady_clock::now();
  waiting.sendSignal(SIGINT);
  auto r = waiting.wait(30s);
  EXPECT_EQ(r.exitCode, 128 + SIGINT) << r.output;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s) << r.output;
}

TEST(DdprunMultiNode, AnUnreachableStoreOrEtcdIsAClearError) {
  const int port = test::freePort();
  auto unreachable = ddprun({"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                             "127.0.0.1:" + std::to_string(port), "--rdzv-conf", "is_host=0,join_timeout=1", "true"});
  EXPECT_EQ(unreachable.exitCode, 1) << unreachable.output;
  EXPECT_NE(unreachable.output.find("c10d store at 127.0.0.1:" + std::to_string(port) + ": cannot connect within"),
            std::string::npos)
      << unreachable.output;
  auto etcdDown = ddprun({"--nnodes", "2", "--rdzv-backend", "etcd-v3", "--rdzv-endpoint",
                          "127.0.0.1:" + std::to_string(port), "--rdzv-conf", "join_timeout=1,read_timeout=1", "true"});
  EXPECT_EQ(etcdDown.exitCode, 1) << etcdDown.output;
  EXPECT_NE(etcdDown.output.find("etcd-v3 at 127.0.0.1:" + std::to_string(port)), std::string::npos) << etcdDown.output;
}

TEST(Ddprun, UnstartableProgramAndBadFlagsAreClearErrors) {
  auto missing = ddprun({"--standalone", "no-such-program-xyz"});
  EXPECT_EQ(missing.exitCode, 1) << missing.output;
  EXPECT_NE(missing.output.find("cannot start worker 'no-such-program-xyz': not found on PATH or beside ddprun"),
            std::string::npos)
      << missing.output;
  auto flag = ddprun({"--nproc-per-node", "zero", "prog"});
  EXPECT_EQ(flag.exitCode, 2) << flag.output;
  EXPECT_NE(flag.output.find("--nproc-per-node"), std::string::npos) << flag.output;
  auto noValue = ddprun({"--max-restarts"});
  EXPECT_EQ(noValue.exitCode, 2) << noValue.output;
  EXPECT_NE(noValue.output.find("ddprun: --max-restarts needs a value (see --help)"), std::string::npos)
      << noValue.output;
  // A filter that names no local rank of this node hides every rank's console output: said once.
  auto filtered = ddprun({"--standalone", "--nproc-per-node", "2", "--local-ranks-filter", "5", "true"});
  EXPECT_EQ(filtered.exitCode, 0) << filtered.output;
  EXPECT_NE(filtered.output.find("--local-ranks-filter: no local rank of this node (0..1) is in it"), std::string::npos)
      << filtered.output;
}

TEST(Ddprun, AnUnusableTmpdirIsOneLineNamingTheVariableAndItsPath) {
  auto missing = ddprun({"--standalone", "/bin/true"}, {{"TMPDIR", "/nonexistent"}});
  EXPECT_EQ(missing.exitCode, 2) << missing.output;
  const std::string expected =
      "TMPDIR=/nonexistent: No such file or directory; ddprun makes its temporary log dir there when --log-dir is not "
      "given: set TMPDIR to a directory, or give --log-dir\n";
  EXPECT_NE(missing.output.find(expected), std::string::npos) << missing.output;
  EXPECT_EQ(missing.output.find("filesystem error"), std::string::npos) << missing.output;
  auto file = ddprun({"--standalone", "/bin/true"}, {{"TMPDIR", "/etc/passwd"}});
  EXPECT_EQ(file.exitCode, 2) << file.output;
  EXPECT_NE(file.output.find("TMPDIR=/etc/passwd: not a directory; "), std::string::npos) << file.output;
  // With --log-dir, TMPDIR is not needed.
  const std::string logs = test::makeTempDir("ddprun-tmpdir");
  EXPECT_EQ(ddprun({"--standalone", "--log-dir", logs, "/bin/true"}, {{"TMPDIR", "/nonexistent"}}).exitCode, 0);
  fs::remove_all(logs);
}

TEST(Ddprun, AGroupThatStopsLeavesNothingOfItsLaunchInDevShmAndNoOtherJobsSegmentIsTouched) {
  // What a shm-backend worker killed during its group's start leaves behind (it could not unlink its segment):
  // ddprun removes its own launch's leftovers when the group stops. Two jobs share the host and the run id:
  // job B's segment (named by its own launch token, as its workers name theirs) and a segment named by the run id
  // (a worker started without ddprun) survive job A's clean-ups.
  const std::string dir = test::makeTempDir("shmshare");
  const std::string byRunId = "/dev/shm/" + shmSegmentName("shmshared", 0, std::string(32, 'c'));
  std::ofstream(byRunId) << "x";
  const std::string segment = "/dev/shm/ddprun-shm-${DDPRUN_LAUNCH_TOKEN}-a${TORCHELASTIC_RESTART_COUNT}-";
  test::ChildProcess jobB(kDdprun,
                          {"--nproc-per-node", "1", "--standalone", "--rdzv-id", "shmshared", "sh", "-c",
                           "f=" + segment + std::string(32, 'b') + "; touch $f; touch " + dir +
                               "/b-ready; while [ ! -e " + dir + "/a-done ]; do sleep 0.05; done; test -e $f && rm $f"},
                          {});
  ASSERT_TRUE(test::waitUntil([&] { return fs::exists(dir + "/b-ready"); }, 60s)) << jobB.outputSoFar();
  auto a = ddprun({"--nproc-per-node", "2", "--standalone", "--rdzv-id", "shmshared", "--max-restarts", "1", "sh", "-c",
                   "f=" + segment + std::string(32, 'a') +
                       "; if [ $TORCHELASTIC_RESTART_COUNT = 0 ]; then touch $f; echo $f > " + dir +
                       "/a-leftover; exit 1; fi; test ! -e /dev/shm/ddprun-shm-${DDPRUN_LAUNCH_TOKEN}-a0-" +
                       std::string(32, 'a')});
  EXPECT_EQ(a.exitCode, 0) << "the leftover of attempt 0 was still there in attempt 1\n" << a.output;
  std::ofstream(dir + "/a-done") << "";
  auto b = jobB.wait(60s);
  EXPECT_EQ(b.exitCode, 0) << "job A's clean-up removed job B's segment\n" << b.output;
  EXPECT_TRUE(fs::exists(byRunId)) << "a segment of the same run id, not of this launch";
  fs::remove(byRunId);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ddprun::launcher
