// The agent's parts that ddprun's process tests reach only through whole launches, here in one process: the
// attempt log on a fake clock, the ticker on a real loop (no sleeps), the workers' store of each round with a
// real store client, the rendezvous session running a one-node round on the store it hosts, and the orphan guard
// with real process groups and directories.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "common/error.hpp"
#include "launcher/history/attempt_log.hpp"
#include "launcher/process/orphan_guard.hpp"
#include "launcher/process/process_spawn.hpp"
#include "launcher/rendezvous_session.hpp"
#include "launcher/round_store.hpp"
#include "launcher/status_snapshot.hpp"
#include "launcher/ticker.hpp"
#include "rendezvous/round_keys.hpp"
#include "store/store_client.hpp"
#include "support/child_process.hpp"
#include "support/fake_clock.hpp"
#include "support/wait_until.hpp"

namespace ddprun::launcher {
namespace {
namespace fs = std::filesystem;
using namespace std::chrono_literals;

WorkerFailure failure(int rank, FailureCause cause, int exitCode, bool waitsOnPeers, int orderMs) {
  WorkerFailure f;
  f.globalRank = rank;
  f.localRank = rank;
  f.cause = cause;
  f.exit.exitCode = exitCode;
  f.message = "rank " + std::to_string(rank) + " failed\nsecond line";
  f.waitsOnPeers = waitsOnPeers;
  f.order = std::chrono::system_clock::time_point(std::chrono::milliseconds(orderMs));
  return f;
}

std::vector<nlohmann::json> jsonLines(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

TEST(AttemptLog, AppendsOneLinePerEndedAttemptWithTheRootCauseFirstAndTheWaitersLeftOut) {
  const std::string dir = test::makeTempDir("attempts");
  test::FakeClock clock;
  AttemptLog log(dir + "/attempts.jsonl", clock);
  log.begin(0, 2);
  clock.advance(1500ms);
  // Rank 1 waited for its peers; rank 2 failed first (earliest order), rank 0 after it.
  log.end("failure", 41,
          {failure(0, FailureCause::kExit, 1, false, 20), failure(1, FailureCause::kHang, 0, true, 5),
           failure(2, FailureCause::kExit, 3, false, 10)});
  log.end("again", 50, {});  // an attempt ends once
  log.begin(1, 2);
  ASSERT_EQ(log.records().size(), 2u);
  EXPECT_FALSE(log.records().back().endUnixMs.has_value()) << "the running attempt has no end";

  const auto lines = jsonLines(dir + "/attempts.jsonl");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["attempt"], 0);
  EXPECT_EQ(lines[0]["end"].get<int64_t>() - lines[0]["start"].get<int64_t>(), 1500);
  EXPECT_EQ(lines[0]["reason"], "failure");
  EXPECT_EQ(lines[0]["best_step"], 41);
  ASSERT_EQ(lines[0]["culprits"].size(), 2u) << lines[0].dump();
  EXPECT_EQ(lines[0]["culprits"][0]["rank"], 2) << "the root cause first";
  EXPECT_EQ(lines[0]["culprits"][1]["rank"], 0);
  EXPECT_EQ(lines[0]["culprits"][0]["message"], "rank 2 failed") << "first line only";

  log.end("success", std::nullopt, {});
  const auto after = jsonLines(dir + "/attempts.jsonl");
  ASSERT_EQ(after.size(), 2u);
  EXPECT_TRUE(after[1]["best_step"].is_null());
  EXPECT_TRUE(after[1]["culprits"].empty());
  fs::remove_all(dir);
}

TEST(AttemptLog, AReplacementIsALineOfItsOwnAndAnEventOfItsAttemptUntilItsGenerationFormed) {
  const std::string dir = test::makeTempDir("attempts");
  test::FakeClock clock;
  AttemptLog log(dir + "/attempts.jsonl", clock);
  log.begin(0, 2);
  clock.advance(2000ms);
  log.replaced(failure(1, FailureCause::kHang, 0, false, 5), 1);
  ASSERT_EQ(log.records().back().replacements.size(), 1u);
  const status::Replacement& r = log.records().back().replacements[0];
  EXPECT_EQ(r.rank, 1);
  EXPECT_EQ(r.generation, 1);
  EXPECT_FALSE(r.formedUnixMs.has_value()) << "forming";
  ASSERT_TRUE(r.failed.has_value());
  EXPECT_EQ(r.failed->cause, "hang");
  clock.advance(40ms);
  log.replacementFormed(2);  // another generation: not this one
  EXPECT_FALSE(log.records().back().replacements[0].formedUnixMs.has_value());
  log.replacementFormed(1);
  ASSERT_TRUE(log.records().back().replacements[0].formedUnixMs.has_value());
  EXPECT_EQ(*log.records().back().replacements[0].formedUnixMs - r.unixMs, 40);
  log.end("success", 70, {});
  const auto lines = jsonLines(dir + "/attempts.jsonl");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["event"], "replacement");
  EXPECT_EQ(lines[0]["rank"], 1);
  EXPECT_EQ(lines[0]["generation"], 1);
  EXPECT_EQ(lines[0]["culprits"][0]["cause"], "hang");
  EXPECT_EQ(lines[1]["reason"], "success");
  fs::remove_all(dir);
}

TEST(AttemptLog, WhenEveryRankWaitsOnItsPeersEveryRankIsNamed) {
  const auto culprits =
      culpritsOf({failure(0, FailureCause::kHang, 0, true, 2), failure(1, FailureCause::kHang, 0, true, 1)});
  ASSERT_EQ(culprits.size(), 2u);
  EXPECT_EQ(culprits[0].rank, 1);
}

/// A `sleep 60` in a process group of its own (its pgid is its pid).
pid_t sleeperInItsOwnGroup() {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::execlp("sleep", "sleep", "60", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here: the guard must not race the child's own call
  return pid;
}

/// How `pid` ended, waiting at most 10 s: the terminating signal, or -1 (still running, or it exited).
int endingSignal(pid_t pid) {
  int status = 0;
  if (!test::waitUntil([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, 10s)) return -1;
  return WIFSIGNALED(status) ? WTERMSIG(status) : -1;
}

/// The guardian both ways: the ddprun-orphan-guard program (spawned), and a fork of this process ("": no program).
class OrphanGuardTest : public ::testing::TestWithParam<std::string> {};

INSTANTIATE_TEST_SUITE_P(BothGuardians, OrphanGuardTest, ::testing::Values(DDPRUN_DDPRUN_ORPHAN_GUARD_BIN, ""),
                         [](const auto& info) { return info.param.empty() ? "Forked" : "Spawned"; });

TEST_P(OrphanGuardTest, WhenDdprunIsGoneItKillsTheGroupsStillTrackedAndRemovesOnlyEmptyDirectories) {
  const fs::path root = test::makeTempDir("orphan_guard");
  fs::create_directories(root / "run" / "attempt_0" / "0");
  fs::create_directories(root / "run" / "attempt_0" / "1");
  fs::create_directories(root / "run" / "kept");
  std::ofstream(root / "run" / "kept" / "log.txt") << "a file is never removed\n";
  fs::create_directories(root / "elsewhere" / "empty");
  fs::create_directory_symlink(root / "elsewhere", root / "run" / "link");  // not followed
  fs::create_directories(root / "not_named");  // empty, but never passed as a whole message
  const pid_t tracked = sleeperInItsOwnGroup();
  const pid_t untracked = sleeperInItsOwnGroup();
  {
    OrphanGuard guard(GetParam());
    guard.track(tracked);
    guard.track(untracked);
    // Many more messages than the guardian reads at once (512 bytes), so lines arrive split across reads.
    for (pid_t fake = 4000000; fake < 4002000; ++fake) guard.track(fake);
    for (pid_t fake = 4000000; fake < 4002000; ++fake) guard.untrack(fake);
    guard.untrack(untracked);
    // A line longer than any one read is one message however it arrives: its tail, which here reads like a message
    // of its own, is not acted on.
    guard.pruneOnExit(std::string(8191, '/') + "d" + (root / "not_named").string());
    guard.pruneOnExit((root / "run").string());
    EXPECT_EQ(::kill(guard.pid(), 0), 0) << "the guardian runs while ddprun does";
    EXPECT_EQ(guard.spawned(), !GetParam().empty());
  }  // ddprun gone: the pipe closes, the guardian acts and exits
  EXPECT_EQ(endingSignal(tracked), SIGKILL);
  EXPECT_EQ(::kill(untracked, 0), 0) << "an untracked group is left alone";
  ::kill(untracked, SIGKILL);
  EXPECT_EQ(endingSignal(untracked), SIGKILL);
  EXPECT_FALSE(fs::exists(root / "run" / "attempt_0"));
  EXPECT_TRUE(fs::exists(root / "run" / "kept" / "log.txt"));
  EXPECT_TRUE(fs::is_symlink(root / "run" / "link"));
  EXPECT_TRUE(fs::exists(root / "elsewhere" / "empty")) << "a symbolic link was followed";
  EXPECT_TRUE(fs::exists(root / "not_named")) << "the tail of a long line was read as a message";
  fs::remove_all(root);
}

TEST_P(OrphanGuardTest, AnEmptyTreeIsRemovedWholeAndTheGuardianIsReaped) {
  const fs::path root = test::makeTempDir("orphan_guard_empty");
  fs::create_directories(root / "run" / "attempt_0" / "0");
  pid_t guardian = -1;
  {
    OrphanGuard guard(GetParam());
    guard.start();
    guardian = guard.pid();
    guard.pruneOnExit((root / "run").string() + "/");  // a trailing slash names the same directory
  }
  EXPECT_FALSE(fs::exists(root / "run"));
  EXPECT_NE(::kill(guardian, 0), 0) << "the guardian was not reaped";
  fs::remove_all(root);
}

TEST(OrphanGuard, TheSpawnedGuardianStartsWithTheFirstTrackedGroupAndGetsTheDirectoriesNamedBefore) {
  const fs::path root = test::makeTempDir("orphan_guard_lazy");
  fs::create_directories(root / "run" / "attempt_0" / "0");
  const pid_t tracked = sleeperInItsOwnGroup();
  {
    OrphanGuard guard(DDPRUN_DDPRUN_ORPHAN_GUARD_BIN);
    guard.pruneOnExit((root / "run").string());
    EXPECT_EQ(guard.pid(), -1) << "a guardian started before any worker (a node waiting in a rendezvous pays for it)";
    guard.untrack(12345);  // nothing to untrack yet: no guardian is started for it
    EXPECT_EQ(guard.pid(), -1);
    guard.track(tracked);
    ASSERT_GT(guard.pid(), 0);
    EXPECT_TRUE(guard.spawned());
    EXPECT_EQ(fs::read_symlink("/proc/" + std::to_string(guard.pid()) + "/exe"),
              fs::canonical(DDPRUN_DDPRUN_ORPHAN_GUARD_BIN));
    const pid_t first = guard.pid();
    guard.start();
    EXPECT_EQ(guard.pid(), first) << "start() twice started a second guardian";
  }
  EXPECT_EQ(endingSignal(tracked), SIGKILL);
  EXPECT_FALSE(fs::exists(root / "run")) << "the directory named before the guardian started was not handed to it";
  fs::remove_all(root);
}

TEST(OrphanGuard, TheSpawnedGuardianHoldsNoDescriptorOfDdprunsButItsPipe) {
  // By the first worker ddprun holds sockets (its rendezvous and store connections); a guardian that outlives it
  // must not keep them open. Here: a descriptor without close-on-exec, as Asio opens its sockets.
  const int opened = ::open("/dev/null", O_RDONLY);
  ASSERT_GE(opened, 0);
  const int inherited = ::fcntl(opened, F_DUPFD, 40);  // above 3, the number the guardian's pipe gets
  ::close(opened);
  ASSERT_GE(inherited, 40);
  {
    OrphanGuard guard(DDPRUN_DDPRUN_ORPHAN_GUARD_BIN);
    guard.start();
    std::set<int> fds;
    for (const auto& entry : fs::directory_iterator("/proc/" + std::to_string(guard.pid()) + "/fd")) {
      fds.insert(std::stoi(entry.path().filename().string()));
    }
    // 0-2 as ddprun's, and 3: the pipe's read end.
    EXPECT_EQ(fds.count(inherited), 0u) << "the guardian inherited ddprun's descriptor " << inherited;
    EXPECT_EQ(fds.count(3), 1u);
    EXPECT_LE(*fds.rbegin(), 3) << "the guardian holds descriptors above its pipe's";
  }
  ::close(inherited);
}

TEST(OrphanGuard, WithoutItsProgramTheGuardianIsAForkMadeAtOnce) {
  OrphanGuard guard("/nonexistent/ddprun-orphan-guard");
  EXPECT_GT(guard.pid(), 0);
  EXPECT_FALSE(guard.spawned());
}

TEST(OrphanGuard, TheProgramAloneSaysItIsStartedByDdprunOnly) {
  auto r = test::runProcess(DDPRUN_DDPRUN_ORPHAN_GUARD_BIN, {}, {}, 10s);
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.output.find("started by ddprun only"), std::string::npos) << r.output;
}

TEST(ChildReaper, DeliversExitsInTheOrderTheyHappenedNotThePidsOrder) {
  // Two children found exited in one look, the one started first (the lower pid) exited last: the order matters
  // (a rank that exited 0 after its peer failed is no early exit), and waitpid alone would give the pids' order.
  boost::asio::io_context io;
  ChildReaper reaper(io);
  int pipe[2];
  ASSERT_EQ(::pipe2(pipe, O_CLOEXEC), 0);
  SpawnSpec waiting;
  waiting.argv = {"cat"};
  waiting.stdinFd = pipe[0];
  const pid_t first = spawnProcess(waiting);  // ends when the pipe closes
  ::close(pipe[0]);
  SpawnSpec quick;
  quick.argv = {"true"};
  const pid_t second = spawnProcess(quick);
  std::vector<pid_t> order;
  reaper.watch(first, [&](ExitStatus) { order.push_back(first); });
  reaper.watch(second, [&](ExitStatus) { order.push_back(second); });
  EXPECT_TRUE(test::waitUntil([&] { return hasExited(second); }, 30s));
  ::close(pipe[1]);
  ASSERT_TRUE(test::waitUntil([&] { return hasExited(first); }, 30s));
  ASSERT_TRUE(hasExited(second));
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (order.size() < 2 && std::chrono::steady_clock::now() < deadline) io.run_one_for(100ms);
  EXPECT_EQ(order, (std::vector<pid_t>{second, first}));
}

TEST(Ticker, RunsItsTasksInOrderOnEveryTickUntilStopped) {
  boost::asio::io_context io;
  Ticker ticker(io, std::chrono::milliseconds(1));
  std::vector<std::string> ran;
  int ticks = 0;
  ticker.add("first", [&] { ran.push_back("first"); });
  ticker.add("second", [&] {
    ran.push_back("second");
    if (++ticks == 3) ticker.stop();
  });
  ticker.start();
  io.run();  // returns once the stopped ticker leaves no work
  EXPECT_EQ(ticks, 3);
  EXPECT_EQ(ran, (std::vector<std::string>{"first", "second", "first", "second", "first", "second"}));
}

TEST(Ticker, AStoppedTickerStartedAgainTicksOnceAgainPerInterval) {
  // The agent stops its ticker while the nodes meet and starts it with the workers.
  boost::asio::io_context io;
  Ticker ticker(io, std::chrono::milliseconds(1));
  int ticks = 0;
  ticker.add("count", [&] {
    if (++ticks == 2) {
      ticker.stop();
      EXPECT_FALSE(ticker.running());
      boost::asio::post(io, [&] { ticker.start(); });
    }
    if (ticks == 5) ticker.stop();
  });
  EXPECT_FALSE(ticker.running());
  ticker.start();
  io.run();
  EXPECT_EQ(ticks, 5);
}

/// Runs `io` on a thread of its own for the test's lifetime.
struct LoopThread {
  boost::asio::io_context io;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work{io.get_executor()};
  std::thread thread{[this] { io.run(); }};
  ~LoopThread() {
    work.reset();
    io.stop();
    thread.join();
  }
  template <typename F>
  auto onLoop(F f) -> decltype(f()) {
    std::packaged_task<decltype(f())()> task(f);
    auto result = task.get_future();
    boost::asio::post(io, [&task] { task(); });
    return result.get();
  }
};

bool keyPresent(store::StoreClient& client, const std::string& key) { return client.wait({key}, 200ms); }

TEST(RoundStore, AStandaloneJobServesOneLoopbackStoreOnAFreePortAndClearsRootKeysBetweenAttempts) {
  LoopThread loop;
  RoundStoreSettings settings;
  settings.standalone = true;
  RoundStore store(loop.io, settings);
  loop.onLoop([&] { store.startFixed(); });
  EXPECT_EQ(store.masterAddr(), "127.0.0.1");
  ASSERT_GT(store.masterPort(), 0);
  store::StoreClient client("127.0.0.1", static_cast<uint16_t>(store.masterPort()), 5s, 5s);
  // Keys as torch's TCPStore client sends them ("/" + key): the dump request at the root, a worker's key under
  // the agent store's PrefixStore("/worker/attempt_0").
  client.set("/exception_dump", "1");
  client.set("//worker/attempt_0/key", "kept");
  client.set("/user_key", "kept");
  client.set("/remote_error", "rank 3 failed");  // torch's TORCH_NCCL_PROPAGATE_ERROR broadcast
  EXPECT_TRUE(keyPresent(client, "/exception_dump"));
  loop.onLoop([&] { store.clearRootKeys(); });
  EXPECT_FALSE(keyPresent(client, "/exception_dump")) << "a root key outlived its attempt";
  EXPECT_FALSE(keyPresent(client, "/remote_error")) << "torch's error broadcast outlived its attempt";
  EXPECT_TRUE(keyPresent(client, "//worker/attempt_0/key")) << "the workers' own keys stay";
  EXPECT_TRUE(keyPresent(client, "/user_key")) << "a user's own key at the root stays, as under torchrun";
  loop.onLoop([&] { store.stop(); });
}

TEST(RoundStore, WithoutTheAgentStoreOnlyAnAddressIsChosenAndEachDynamicRoundGetsAFreshStore) {
  LoopThread loop;
  RoundStoreSettings settings;
  settings.useAgentStore = false;
  RoundStore noAgentStore(loop.io, settings);
  loop.onLoop([&] { noAgentStore.startFixed(); });
  EXPECT_GT(noAgentStore.masterPort(), 0);
  EXPECT_EQ(noAgentStore.server(), nullptr) << "rank 0's worker hosts the store";

  settings = RoundStoreSettings{};
  settings.mode = RendezvousMode::kDynamic;
  settings.localAddr = "127.0.0.1";
  RoundStore rounds(loop.io, settings);
  const int first = loop.onLoop([&] { return rounds.startForRound(); });
  store::StoreClient firstClient("127.0.0.1", static_cast<uint16_t>(first), 5s, 5s);
  firstClient.set("round", "0");
  const int second = loop.onLoop([&] { return rounds.startForRound(); });
  EXPECT_NE(first, second);
  store::StoreClient secondClient("127.0.0.1", static_cast<uint16_t>(second), 5s, 5s);
  EXPECT_FALSE(keyPresent(secondClient, "round")) << "a key of the earlier round leaked into the next";

  settings.localAddr = "192.0.2.77";  // TEST-NET: no address of this machine
  RoundStore foreign(loop.io, settings);
  EXPECT_THROW(loop.onLoop([&] { return foreign.startForRound(); }), ConfigError);
  loop.onLoop([&] {
    rounds.stop();
    foreign.stop();
  });
}

TEST(RendezvousSession, HostsTheStoreAtItsEndpointAndRunsAOneNodeRoundOnItsOwnThread) {
  SessionSettings settings;
  settings.mode = RendezvousMode::kDynamic;
  settings.rdzvBackend = "c10d";
  settings.rdzvHost = "127.0.0.1";
  settings.rdzvPort = test::freePort();
  settings.rdzvId = "parts";
  RendezvousSession session(settings);
  EXPECT_TRUE(session.hostsStore()) << "the endpoint is this machine";
  std::promise<rendezvous::RoundAssignment> assigned;
  std::promise<std::string> connectError;
  session.post(
      [&](rendezvous::RendezvousHandler& handler) {
        rendezvous::NodeDescriptor self{"node_a", "127.0.0.1", 3, "127.0.0.1", 1234};
        assigned.set_value(handler.next(self, session.cancelFlag()));
      },
      [&](const std::string& error) { connectError.set_value(error); });
  auto result = assigned.get_future();
  ASSERT_EQ(result.wait_for(60s), std::future_status::ready);
  const auto round = result.get();
  EXPECT_EQ(round.groupWorldSize, 1);
  EXPECT_EQ(round.worldSize, 3);
  EXPECT_EQ(round.masterPort, 1234);
  // The round is in the hosted store, where other nodes read it: node_a's record under ticket 1 of round 0.
  store::StoreClient observer("127.0.0.1", static_cast<uint16_t>(settings.rdzvPort), 5s, 5s);
  const auto record = observer.get("/ddprun.rdzv.parts/" + rendezvous::round_keys::node(0, 1));
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(rendezvous::decodeRecord(*record).id, "node_a");
}

TEST(StatusSnapshot, AfterAHangOnlyTheRanksItsRecordNamesStayMarkedHung) {
  // Both ranks were flagged by the verdict; rank 1 held rank 0 up, which waited in its allreduce (issue 58: the report
  // marked both HUNG).
  status::AgentSnapshot s;
  for (int rank : {0, 1}) {
    status::RankSnapshot r;
    r.globalRank = r.localRank = rank;
    r.hung = true;
    r.state = "hung";
    s.ranks.push_back(r);
  }
  status::AttemptRecord attempt;
  attempt.endUnixMs = 1;
  attempt.reason = "hang";
  status::Culprit culprit;
  culprit.rank = 1;
  attempt.culprits = {culprit};
  s.attempts = {attempt};
  markCulpritsOfAHang(s);
  EXPECT_FALSE(s.ranks[0].hung);
  EXPECT_EQ(s.ranks[0].state, "stopped");
  EXPECT_TRUE(s.ranks[1].hung);
  EXPECT_EQ(s.ranks[1].state, "hung");
}

}  // namespace
}  // namespace ddprun::launcher
