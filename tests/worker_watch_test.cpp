// The whole path from a suspected hang to the restart, on fakes: a fake clock, a fake worker group, recorded stacks
// and /proc counters, real progress files, and the real AgentPolicy. No processes, no sleeps.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include "launcher/agent_policy.hpp"
#include "launcher/watch/worker_watch.hpp"
#include "support/fake_clock.hpp"

namespace ddprun::launcher {
namespace {
namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string recordedStacks(const std::string& name) {
  std::ifstream in(std::string(DDPRUN_SOURCE_DIR) + "/tests/data/stacks/" + name + ".txt");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

/// The recorded stacks' pids (their first line), so that the fake group's ranks have those pids.
pid_t recordedPid(const std::string& name) {
  std::smatch pid;
  const std::string text = recordedStacks(name);
  if (std::regex_search(text, pid, std::regex(R"(PID (\d+) - process|\(LWP (\d+)\))"))) {
    return std::stoi(pid[1].matched ? pid[1].str() : pid[2].str());
  }
  return -1;
}

/// Recorded stacks as if taken of `pid` (a rank of the fake group that was recorded elsewhere).
std::string recordedStacksOf(const std::string& name, pid_t pid) {
  const std::string recorded = std::to_string(recordedPid(name));
  std::string text = recordedStacks(name);
  for (size_t at = 0; (at = text.find(recorded, at)) != std::string::npos; at += std::to_string(pid).size()) {
    text.replace(at, recorded.size(), std::to_string(pid));
  }
  return text;
}

/// Ranks that exist only as table rows; their exits go to `onExit` on the loop, as SIGCHLD would bring them.
class FakeGroup : public WorkerGroupView {
 public:
  struct Rank {
    pid_t pid = 0;
    std::optional<WorkerExit> exit;
    bool delivered = false;  ///< the exit reached the policy (as WorkerGroup's exits do before finished())
  };
  std::vector<Rank> ranks;
  std::vector<size_t> aborted;
  std::function<void(size_t, WorkerExit, bool stoppedByUs)> onExit;

  void start(const std::vector<pid_t>& pids) {
    ranks.clear();
    for (pid_t pid : pids) ranks.push_back({pid, std::nullopt});
  }
  void end(size_t local, int code, int signal, bool stoppedByUs) {
    WorkerExit exit;
    exit.exitCode = code;
    exit.signal = signal;
    exit.when = std::chrono::system_clock::now();
    ranks[local].exit = exit;
    onExit(local, exit, stoppedByUs);
  }
  size_t size() const override { return ranks.size(); }
  pid_t pid(size_t local) const override { return ranks[local].pid; }
  int globalRank(size_t local) const override { return static_cast<int>(local); }
  const std::optional<WorkerExit>& exit(size_t local) const override { return ranks[local].exit; }
  std::chrono::steady_clock::time_point lastOutput(size_t) const override { return {}; }
  bool finished(size_t local) const override { return ranks[local].delivered; }
  bool outputHeld(size_t local) const override { return held.count(local) > 0; }
  std::set<size_t> held;  ///< ranks whose output the console does not take
  void abortForTracebacks(size_t local, int fd) override {
    ::close(fd);
    aborted.push_back(local);
    end(local, 0, SIGABRT, true);
  }
};

/// /proc counters, Python positions and stacks by pid, as the test sets them; samples are taken at the fake time and
/// answered on the loop, as the machine's reader thread does.
class FakeEvidence : public EvidenceSource {
 public:
  FakeEvidence(boost::asio::io_context& io, const Clock& clock) : io_(io), clock_(clock) {}
  std::map<pid_t, ActivityCounters> counters;
  std::map<pid_t, std::string> stacks;  ///< recorded stack dumps
  int collections = 0;

  std::optional<ProgressRecord> progress(size_t, const std::string& file) override { return readProgressFile(file); }
  void sample(std::vector<SampleTarget> targets, SamplesDone done) override {
    std::vector<RankSample> samples;
    for (const auto& target : targets) {
      RankSample sample;
      sample.localRank = target.localRank;
      sample.at = clock_.now();
      sample.counters = counters[target.pid];
      sample.counters.socketsRead = target.sockets;
      if (target.python) {
        ++pythonReads;
        sample.python = python[target.pid];
      }
      samples.push_back(sample);
    }
    boost::asio::post(io_, [done, samples] { done(samples); });
  }
  void collectStacks(std::vector<StackTarget> targets, std::chrono::milliseconds, StacksDone done) override {
    ++collections;
    std::vector<RankStacks> saved;
    for (const auto& target : targets) {
      saved.push_back({target.localRank, target.file, classifyMainThread(stacks[target.pid], target.pid)});
    }
    if (!holdStacks) {
      boost::asio::post(io_, [done, saved] { done(saved); });
      return;
    }
    // As eu-stack does: the ranks are ptrace-stopped (state t) until the tool is done.
    for (const auto& target : targets) counters[target.pid].mainThreadState = 't';
    releaseStacks = [this, done, saved, targets] {
      for (const auto& target : targets) counters[target.pid].mainThreadState = 'S';
      done(saved);
    };
  }
  std::map<pid_t, PythonPosition> python;  ///< what a read of each process's Python position finds
  int pythonReads = 0;
  bool holdStacks = false;  ///< collectStacks answers only when the test calls releaseStacks
  std::function<void()> releaseStacks;
  /// Every process `pid` burns `seconds` of CPU (called each simulated tick).
  void burn(pid_t pid, double seconds) { counters[pid].cpuSeconds += seconds; }

 private:
  boost::asio::io_context& io_;
  const Clock& clock_;
};

/// The agent's part, played by the test: the policy's actions carried out on the fakes.
class Harness : public AgentActions {
 public:
  Harness(std::vector<std::string> stackNames, bool python = false, bool multiNode = false,
          HangSettings::SpinAction spinAction = HangSettings::SpinAction::kReport)
      : names_(std::move(stackNames)),
        dir_(::testing::TempDir() + "watch-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++)),
        evidence(io, clock),
        watch(
            io, clock, group, evidence, settings(python, multiNode, spinAction),
            [this](const std::string& key, const std::string& value) {
              storeKeys[key] = value;
              return true;
            },
            [this](std::vector<WorkerFailure> hung) {
              log.push_back("hang");
              policy.onHang(std::move(hung));
            }),
        policy(*this, /*maxRestarts=*/3, /*multiNode=*/false) {
    fs::create_directories(dir_);
    for (const auto& name : names_) {
      pids_.push_back(recordedPid(name));
      evidence.stacks[pids_.back()] = recordedStacks(name);
    }
    group.onExit = [this](size_t local, WorkerExit exit, bool stoppedByUs) {
      WorkerExitEvent event;
      event.localRank = event.globalRank = static_cast<int>(local);
      event.exit = exit;
      event.stoppedByUs = stoppedByUs;
      event.failure = describeFailure(event.globalRank, event.localRank, group.pid(local), exit, "");
      const bool all =
          std::all_of(group.ranks.begin(), group.ranks.end(), [](const auto& r) { return r.exit.has_value(); });
      boost::asio::post(io, [this, event, all, local] {
        group.ranks[local].delivered = true;
        policy.onWorkerExit(event, all);
      });
    };
  }
  ~Harness() override { fs::remove_all(dir_); }

  static WorkerWatch::Settings settings(bool python, bool multiNode, HangSettings::SpinAction spinAction) {
    WorkerWatch::Settings s;
    s.pythonWorkers = python;
    s.multiNode = multiNode;
    s.hang.spinAction = spinAction;
    return s;
  }

  /// The policy starts the first attempt: the workers start and the watch is told.
  void start() {
    policy.start();
    io.poll();
    io.restart();
  }
  /// Ranks 0 and 1 report steps 0 to `last` together, one a tick.
  void stepTogether(int last) {
    for (int s = 0; s <= last; ++s) {
      report(0, s);
      report(1, s);
      step();
    }
  }
  std::string progressFile(size_t local) const { return dir_ + "/" + std::to_string(local) + ".progress"; }
  FlightRecorderFiles flightRecorder(size_t local) const {
    return flightRecorderFiles(dir_ + "/rank" + std::to_string(local), static_cast<int>(local),
                               [](const char*) { return std::nullopt; });
  }
  void report(size_t local, int64_t step, const std::string& phase = "") {
    std::ofstream(progressFile(local)) << step << "\n" << (phase.empty() ? "" : "0 " + phase + "\n");
  }
  /// Advances the fake time by `dt`, ticks the watch and runs what became due on the loop.
  void step(std::chrono::milliseconds dt = 100ms) {
    clock.advance(dt);
    watch.tick();
    io.poll();
    io.restart();
  }
  /// Steps until `done` or `limit` of fake time; returns the fake time it took.
  std::chrono::milliseconds stepUntil(const std::function<bool()>& done, std::chrono::milliseconds limit) {
    std::chrono::milliseconds passed{0};
    while (!done() && passed < limit) {
      step();
      passed += 100ms;
    }
    return passed;
  }
  bool saw(const std::string& action) const { return std::find(log.begin(), log.end(), action) != log.end(); }

  // AgentActions
  void beginRendezvous() override { log.push_back("rendezvous"); }
  void startWorkers() override {
    log.push_back("start");
    boost::asio::post(io, [this] {
      group.start(pids_);
      for (size_t local = 0; local < pids_.size(); ++local) fs::remove(progressFile(local));
      std::vector<WorkerWatch::RankFiles> files;
      for (size_t local = 0; local < pids_.size(); ++local) {
        files.push_back({progressFile(local), dir_ + "/stacks", flightRecorder(local)});
      }
      watch.startAttempt(files);
    });
  }
  void stopWorkers(int signal) override {
    log.push_back("stop " + signalName(signal));
    for (size_t local = 0; local < group.size(); ++local) {
      if (!group.exit(local)) group.end(local, 0, signal, true);
    }
  }
  void killWorkers() override { log.push_back("kill"); }
  void killWorker(int local) override {
    log.push_back("kill " + std::to_string(local));
    group.end(static_cast<size_t>(local), 0, SIGKILL, true);
  }
  /// As the agent's coordinator: the claim answered later (posted), then the record completed, the watch told, a
  /// new process (pid + 1000) in the rank's place.
  void replaceWorker(const WorkerExitEvent& event) override {
    const auto local = static_cast<size_t>(event.localRank);
    log.push_back("replace " + std::to_string(local));
    boost::asio::post(io, [this, local, event] {
      if (!policy.onReplacementClaimed()) return;
      replaced.push_back(watch.completeRecords({event.failure}).front());
      if (watch.rankReplaced(local)) log.push_back("verdict over");
      const pid_t next = group.ranks[local].pid + 1000;
      evidence.stacks[next] = evidence.stacks[group.ranks[local].pid];
      group.ranks[local] = {next, std::nullopt, false};
    });
  }
  void saveTracebacks() override {
    log.push_back("tracebacks");
    watch.saveTracebacksThen([this] { policy.onTracebacksSaved(); });
  }
  void endAttempt(const AttemptEnd& end) override {
    log.push_back(std::string("end ") + toString(end.reason));
    ended.push_back({end.reason, watch.completeRecords(end.failures)});  // as the agent does, before any restart
  }
  void reportFailures(const std::vector<WorkerFailure>&) override { log.push_back("report"); }
  void finishNode(NodeEnd, int code) override { log.push_back("finish " + std::to_string(code)); }
  void cutFinishShort() override { log.push_back("cut finish short"); }
  void confirmMembership() override { log.push_back("confirm membership"); }

  boost::asio::io_context io;
  test::FakeClock clock;
  FakeGroup group;
  std::vector<std::string> names_;
  std::vector<pid_t> pids_;
  std::string dir_;
  FakeEvidence evidence;
  WorkerWatch watch;
  AgentPolicy policy;
  std::vector<std::string> log;
  std::vector<AttemptEnd> ended;
  std::vector<WorkerFailure> replaced;           ///< the records of ranks replaced in place
  std::map<std::string, std::string> storeKeys;  ///< what the watch set at the root of the workers' store

 private:
  static inline int counter_ = 0;
};

TEST(WorkerWatch, AHangAtStepTwoIsFoundAtTheFloorAndTheGroupRestarts) {
  Harness h({"gloo-reducer-finalize-backward", "python-time-sleep"});
  h.start();
  h.stepTogether(2);
  // Rank 1 sleeps at step 2 (1.5 % of a core: its background threads); rank 0 waits in DDP's backward.
  const auto took = h.stepUntil(
      [&] {
        h.evidence.burn(h.pids_[1], 0.0015);
        return h.saw("hang");
      },
      30s);
  EXPECT_GE(took, 5000ms) << "not before the floor";
  EXPECT_LE(took, 5600ms) << "within a few ticks and samples of it";
  EXPECT_EQ(h.evidence.collections, 1) << "one look at the stacks decided it";
  h.stepUntil([&] { return h.policy.state() == AgentState::kRunning && h.saw("end hang"); }, 5s);
  EXPECT_EQ(h.log, (std::vector<std::string>{"start", "hang", "tracebacks", "stop SIGTERM", "end hang", "start"}));
  ASSERT_EQ(h.ended.size(), 1u);
  const auto& failures = h.ended[0].failures;
  ASSERT_EQ(failures.size(), 2u);
  EXPECT_EQ(failures[rootCauseIndex(failures)].globalRank, 1) << "the rank asleep, not the one waiting for it";
  EXPECT_EQ(failures[0].cause, FailureCause::kHang);
  EXPECT_EQ(h.policy.restartCount(), 1);
}

TEST(WorkerWatch, AHangBeforeAnyReportIsFoundOnTheDeadlocksSignature) {
  // A script that reports a step once it is done (or never): rank 1 hangs in step 0 of attempt 0 while rank 0 waits
  // for it in DDP's backward. No rank has reported, yet the signature is there: found at twice the floor.
  Harness h({"gloo-reducer-finalize-backward", "python-time-sleep"});
  h.start();
  const auto took = h.stepUntil(
      [&] {
        h.evidence.burn(h.pids_[1], 0.0015);
        return h.saw("hang");
      },
      60s);
  EXPECT_GE(took, 10000ms) << "twice the floor: nothing says how long its steps take";
  EXPECT_LE(took, 11000ms) << "a tick, a look and a fresh sample after it";
}

TEST(WorkerWatch, AJobThatNeverReportsAndSleepsOnEveryRankIsNeverFlagged) {
  // Every rank sleeps outside any collective for ten minutes without ever reporting: no deadlock, and no idle timeout
  // for a job that has said nothing of its steps.
  Harness h({"python-time-sleep", "python-time-sleep"});
  h.start();
  h.stepUntil([&] { return h.saw("hang"); }, 700s);
  EXPECT_FALSE(h.saw("hang"));
}

TEST(WorkerWatch, ARankSeenArrivingInACollectiveMustWaitThereATimeoutBeforeItsPeerIsCalledHung) {
  // A job that never reports: every rank pauses in time.sleep; rank 0 wakes first and enters DDP's backward, its
  // compute too short to show, so it looks idle since before the pause. The look that sees it arrive is not a
  // verdict: a peer woken late on a loaded machine joins it within moments. Only a timeout there makes one.
  Harness h({"python-time-sleep", "python-time-sleep"});
  h.start();
  h.stepUntil([&] { return h.saw("hang"); }, 30s);
  ASSERT_FALSE(h.saw("hang"));
  const int looksBefore = h.evidence.collections;
  h.evidence.stacks[h.pids_[0]] = recordedStacksOf("gloo-reducer-finalize-backward", h.pids_[0]);
  h.stepUntil([&] { return h.evidence.collections > looksBefore; }, 30s);
  ASSERT_GT(h.evidence.collections, looksBefore) << "looked again";
  EXPECT_FALSE(h.saw("hang")) << "the look that saw rank 0 arrive decided nothing";
  const auto took = h.stepUntil([&] { return h.saw("hang"); }, 60s);
  EXPECT_TRUE(h.saw("hang")) << "rank 1 never woke: a hang after all";
  EXPECT_GE(took, 10000ms) << "a timeout (twice the floor, no reports) after the look that saw rank 0 arrive";
  EXPECT_LE(took, 21000ms);
}

TEST(WorkerWatch, DdprunsOwnStackToolIsNeverTakenForASigstop) {
  // eu-stack ptrace-stops a rank while it reads its stacks (state t); samples taken meanwhile must not make the rank
  // "stopped (SIGSTOP, or a debugger holds it)", a person's doing that would excuse the hang.
  Harness h({"gloo-reducer-finalize-backward", "python-time-sleep"});
  h.evidence.holdStacks = true;
  h.start();
  h.stepTogether(2);
  h.stepUntil([&] { return h.evidence.collections == 1; }, 30s);
  for (int tick = 0; tick < 10; ++tick) h.step();  // the tool takes a second
  h.evidence.releaseStacks();  // the look's own judgement, with the samples taken while the tool held the ranks
  h.stepUntil([&] { return h.saw("hang"); }, 1s);
  EXPECT_TRUE(h.saw("hang"));
}

TEST(WorkerWatch, WithRankReplacementOnlyTheHangsCulpritIsReplacedAndTheWatchJudgesAfresh) {
  Harness h({"gloo-reducer-finalize-backward", "python-time-sleep"});
  h.policy.enableRankReplacement();
  h.start();
  h.stepTogether(2);
  // Rank 1 sleeps at step 2; rank 0 waits for it in DDP's backward: rank 1 alone is killed and replaced.
  h.stepUntil([&] { return h.saw("replace 1"); }, 30s);
  EXPECT_EQ(h.log, (std::vector<std::string>{"start", "hang", "tracebacks", "kill 1", "replace 1", "verdict over"}));
  EXPECT_EQ(h.policy.state(), AgentState::kRunning);
  ASSERT_EQ(h.replaced.size(), 1u);
  EXPECT_EQ(h.replaced[0].cause, FailureCause::kHang);
  EXPECT_EQ(h.replaced[0].exit.signal, SIGKILL);
  EXPECT_NE(h.replaced[0].stacksFile, "") << "the record says where its stacks are";
  EXPECT_FALSE(h.watch.progress(0).hung) << "the hung marks went with the verdict";
  // Rank 0 waited through the hang; its silence counts from the replacement, so it is not suspected at once.
  h.stepUntil([] { return false; }, 4s);
  EXPECT_EQ(h.log.size(), 6u) << "nothing new within the floor after the replacement";
  // Training goes on with the new rank 1; when it sleeps again, the hang is found again and replaced again.
  for (int step = 3; step <= 5; ++step) {
    h.report(0, step);
    h.report(1, step);
    h.step();
  }
  h.policy.onReplacementFormed();
  const auto took = h.stepUntil([&] { return h.replaced.size() == 2; }, 30s);
  EXPECT_GE(took, 5000ms);
  EXPECT_LE(took, 6000ms);
  EXPECT_EQ(h.policy.replacementCount(), 2);
  EXPECT_TRUE(h.ended.empty()) << "the attempt never ended";
}

TEST(WorkerWatch, AnUnannouncedEvaluationIsWatchedNotKilledAndAHangAfterItIsStillFound) {
  Harness h({"python-eval-compute", "python-eval-compute"});
  h.start();
  h.stepTogether(10);
  // Both ranks evaluate for 12 s (a core each) without a step.
  for (int tick = 0; tick < 120; ++tick) {
    h.evidence.burn(h.pids_[0], 0.1);
    h.evidence.burn(h.pids_[1], 0.1);
    h.step();
  }
  EXPECT_FALSE(h.saw("hang"));
  EXPECT_GE(h.evidence.collections, 2) << "looked again once its first look was a timeout old";
  EXPECT_LE(h.evidence.collections, 3);
  // Training goes on, then rank 0 sleeps outside any collective while rank 1 waits in a barrier: that is a hang.
  h.evidence.stacks[h.pids_[0]] = recordedStacksOf("python-time-sleep", h.pids_[0]);
  h.evidence.stacks[h.pids_[1]] = recordedStacksOf("gloo-barrier", h.pids_[1]);
  for (int step = 11; step <= 20; ++step) {
    h.report(0, step);
    h.report(1, step);
    h.step();
  }
  const auto took = h.stepUntil([&] { return h.saw("hang"); }, 200s);
  EXPECT_LT(took, 80s) << "judged by what the evaluation taught: 5 x 12 s";
  EXPECT_TRUE(h.saw("hang"));
}

TEST(WorkerWatch, APythonRankIsASpinOnlyWhenItsScriptStaysInOnePlaceAndItsPeerWaits) {
  // Rank 1's main thread is in the interpreter's bytecode loop at every look, a whole core, no I/O; rank 0 waits in
  // DDP's allreduce. Twice a second the watch reads rank 1's Python position.
  struct Outcome {
    std::chrono::milliseconds took{};
    int reads = 0;
    uint64_t spins = 0;
    bool hang = false;
    std::string suspected;
  };
  const auto run = [](bool moves, HangSettings::SpinAction action) {
    Harness h({"gloo-reducer-finalize-backward", "python-spin"}, false, false, action);
    h.start();
    h.stepTogether(2);
    PythonPosition position;
    position.status = PythonPosition::Status::kRead;
    position.frames = {{"metrics.py", "score", 12}};
    position.state = 7;
    Outcome outcome;
    outcome.took = h.stepUntil(
        [&] {
          h.evidence.burn(h.pids_[1], 0.1);
          // A computation: its loop variable changes between reads. A spin over two lines (`while True:` and
          // `pass`) comes back to the same two states.
          position.state = moves ? position.state + 1 : 15 - position.state;
          position.instruction = position.state;
          h.evidence.python[h.pids_[1]] = position;
          return h.saw("hang") || h.watch.counters().spins > 0;
        },
        200s);
    outcome.reads = h.evidence.pythonReads;
    outcome.spins = h.watch.counters().spins;
    outcome.hang = h.saw("hang");
    outcome.suspected = h.watch.progress(1).suspected;
    return outcome;
  };
  // `while True: pass`: no state it had not been in before, in any read since the first look (at the 5 s floor).
  // Reported once no rank has stepped for the spin timeout (30 s), and left to the busy timeout.
  const Outcome spin = run(false, HangSettings::SpinAction::kReport);
  EXPECT_GE(spin.took, 30s);
  EXPECT_LE(spin.took, 31500ms);
  EXPECT_EQ(spin.spins, 1u);
  EXPECT_FALSE(spin.hang) << "a spin is reported, not acted on, by default";
  EXPECT_EQ(spin.suspected, "spins in one place? (File \"metrics.py\", line 12, in score)");
  EXPECT_GE(spin.reads, 45) << "read twice a second from the first look on";
  EXPECT_LE(spin.reads, 60);
  // --hang-spin-action restart: the same evidence is a hang.
  const Outcome restart = run(false, HangSettings::SpinAction::kRestart);
  EXPECT_TRUE(restart.hang);
  EXPECT_GE(restart.took, 30s);
  EXPECT_LE(restart.took, 31500ms);
  // A pure-Python computation with the same native stacks: never a spin (200 s, well past the spin timeout).
  const Outcome compute = run(true, HangSettings::SpinAction::kRestart);
  EXPECT_EQ(compute.took, 200s);
  EXPECT_EQ(compute.spins, 0u);
  EXPECT_GE(compute.reads, 350);
}

TEST(WorkerWatch, ANewAttemptIsJudgedFromItsStartAndARankThatLeftEarlyIsTheCause) {
  Harness h({"nccl-comm-init-recv", "python-time-sleep"});
  h.start();
  h.stepTogether(5);
  // Rank 1 leaves with exit code 0 (a SIGTERM handler calling sys.exit(0)); rank 0 waits in NCCL, spinning.
  h.group.end(1, 0, 0, false);
  const auto took = h.stepUntil(
      [&] {
        h.evidence.burn(h.pids_[0], 0.1);
        return h.saw("hang");
      },
      30s);
  EXPECT_LE(took, 5600ms);
  h.stepUntil([&] { return h.saw("end hang"); }, 5s);
  ASSERT_EQ(h.ended.size(), 1u);
  const auto& failures = h.ended[0].failures;
  ASSERT_EQ(failures.size(), 2u);
  const auto& root = failures[rootCauseIndex(failures)];
  EXPECT_EQ(root.globalRank, 1);
  EXPECT_EQ(root.cause, FailureCause::kEarlyExit);
  EXPECT_EQ(likelyCause(failures, rootCauseIndex(failures)), "rank 1 exited 0 while its peers still ran");
  // Attempt 1: no rank reports; rank 0 waits in a barrier for rank 1, asleep. The job reported before, so it is
  // judged from the attempt's start by the longest start-up it saw (the first report came within a tick: the floor
  // applies).
  h.stepUntil([&] { return h.policy.state() == AgentState::kRunning; }, 5s);
  h.evidence.stacks[h.pids_[0]] = recordedStacksOf("gloo-barrier", h.pids_[0]);
  const auto startup = h.stepUntil([&] { return std::count(h.log.begin(), h.log.end(), "hang") == 2; }, 60s);
  EXPECT_LE(startup, 5600ms);
}

TEST(WorkerWatch, ARankStillInTheFinalBarrierWhenItsPeerExitedZeroIsNotHung) {
  // The end of a healthy job after a long unannounced pause (the suspicion is on): rank 0 leaves the final barrier and
  // exits 0; rank 1, on a loaded machine, is seen in that barrier for 3 s more before it exits 0 too.
  Harness h({"python-time-sleep", "gloo-barrier"});
  h.start();
  h.stepTogether(5);
  // Rank 0 computes 20 s (unannounced) while rank 1 waits in the barrier: the job works.
  h.evidence.stacks[h.pids_[0]] = recordedStacksOf("python-eval-compute", h.pids_[0]);
  for (int tick = 0; tick < 200; ++tick) {
    h.evidence.burn(h.pids_[0], 0.1);
    h.step();
  }
  ASSERT_FALSE(h.saw("hang"));
  h.group.end(0, 0, 0, false);
  h.stepUntil([] { return false; }, 3s);
  EXPECT_FALSE(h.saw("hang")) << "rank 0 has just exited: rank 1 may be finishing the barrier with it";
  h.group.end(1, 0, 0, false);
  h.stepUntil([&] { return h.saw("end success"); }, 5s);
  EXPECT_TRUE(h.saw("end success"));
  EXPECT_FALSE(h.saw("hang"));
}

TEST(WorkerWatch, PythonRanksAreAbortedForTheirTracebacksBeforeTheStop) {
  Harness h({"gloo-reducer-finalize-backward", "python-time-sleep"}, /*python=*/true);
  h.start();
  h.report(0, 0);
  h.report(1, 0);
  h.step();
  h.stepUntil([&] { return h.saw("end hang"); }, 30s);
  // Both ranks end by ddprun's SIGABRT while the policy collects: nothing is left to stop.
  EXPECT_EQ(h.log, (std::vector<std::string>{"start", "hang", "tracebacks", "end hang", "start"}));
  EXPECT_EQ(h.group.aborted, (std::vector<size_t>{0, 1}));
}

/// A FIFO where torch would create a rank's dump pipe, opened for reading as torch does (non-blocking).
int torchPipe(const std::string& path) {
  fs::create_directories(fs::path(path).parent_path());
  if (::mkfifo(path.c_str(), 0600) != 0) return -1;
  return ::open(path.c_str(), O_RDONLY | O_NONBLOCK);
}

TEST(WorkerWatch, AHungNcclJobLeavesAFlightRecorderDumpPerRankBeforeItIsStopped) {
  Harness h({"nccl-comm-init-recv", "python-time-sleep"});
  h.start();
  const int pipe0 = torchPipe(h.flightRecorder(0).pipeFile);
  const int pipe1 = torchPipe(h.flightRecorder(1).pipeFile);
  ASSERT_GE(pipe0, 0);
  ASSERT_GE(pipe1, 0);
  h.report(0, 0);
  h.report(1, 0);
  h.step();
  h.stepUntil([&] { return h.saw("tracebacks"); }, 30s);
  h.step();
  // Both ranks were asked, through their pipes and the store's key naming rank 1, the one asleep.
  char byte = 0;
  EXPECT_EQ(::read(pipe0, &byte, 1), 1);
  EXPECT_EQ(::read(pipe1, &byte, 1), 1);
  EXPECT_EQ(h.storeKeys["/exception_dump"], dumpKeyValue(1)) << "the key torch's TCPStore client checks";
  EXPECT_FALSE(h.saw("stop SIGTERM")) << "nothing is stopped while the dumps are written";
  // torch writes the dumps; once they have held still for the quiet period the group is stopped.
  std::ofstream(h.flightRecorder(0).dumpFile) << "dump of rank 0";
  std::ofstream(h.flightRecorder(1).dumpFile) << "dump of rank 1";
  const auto waited = h.stepUntil([&] { return h.saw("stop SIGTERM"); }, 5s);
  EXPECT_GE(waited, 2900ms) << "a dump that held still for less than 3 s may be rewritten";
  EXPECT_LE(waited, 3600ms);
  h.stepUntil([&] { return h.saw("end hang"); }, 2s);
  ASSERT_TRUE(h.saw("stop SIGTERM"));
  const auto& records = h.ended.at(0).failures;
  ASSERT_EQ(records.size(), 2u);
  for (const auto& record : records) {
    EXPECT_EQ(record.flightRecorderDump, h.flightRecorder(static_cast<size_t>(record.localRank)).dumpFile);
    EXPECT_NE(record.traceback.find("NCCL flight recorder: "), std::string::npos) << record.traceback;
  }
  ::close(pipe0);
  ::close(pipe1);
}

// Both the pipe and the store key reach a rank, so torch may write its dump twice; the second write truncates and
// rewrites the file. Nothing is stopped until the rewrite too has held still.
TEST(WorkerWatch, ASecondDumpOfTheSameRankIsWaitedForBeforeTheStop) {
  Harness h({"nccl-comm-init-recv", "python-time-sleep"});
  h.start();
  const int pipe0 = torchPipe(h.flightRecorder(0).pipeFile);
  ASSERT_GE(pipe0, 0);
  h.report(0, 0);
  h.report(1, 0);
  h.step();
  h.stepUntil([&] { return h.saw("tracebacks"); }, 30s);
  const std::string dump = h.flightRecorder(0).dumpFile;
  std::ofstream(dump) << "first dump of rank 0";
  h.stepUntil([] { return false; }, 2s);
  EXPECT_FALSE(h.saw("stop SIGTERM"));
  std::ofstream(dump) << "";  // the second dump: truncated, not yet written
  h.stepUntil([] { return false; }, 2s);
  EXPECT_FALSE(h.saw("stop SIGTERM")) << "an empty dump is not complete";
  std::ofstream(dump) << "second dump of rank 0, longer";
  const auto waited = h.stepUntil([&] { return h.saw("stop SIGTERM"); }, 5s);
  EXPECT_GE(waited, 2900ms);
  EXPECT_LE(waited, 3600ms);
  h.stepUntil([&] { return h.saw("end hang"); }, 2s);
  EXPECT_EQ(h.ended.at(0).failures.at(0).flightRecorderDump, dump);
  ::close(pipe0);
}

TEST(WorkerWatch, AFlightRecorderThatNeverWritesDelaysTheStopByABoundedTime) {
  Harness h({"nccl-comm-init-recv", "python-time-sleep"});
  h.start();
  const int pipe0 = torchPipe(h.flightRecorder(0).pipeFile);
  h.report(0, 0);
  h.report(1, 0);
  h.step();
  h.stepUntil([&] { return h.saw("tracebacks"); }, 30s);
  const auto waited = h.stepUntil([&] { return h.saw("stop SIGTERM"); }, 30s);
  EXPECT_GE(waited, 14900ms);
  EXPECT_LE(waited, 15200ms);
  ::close(pipe0);
}

TEST(FlightRecorder, ADumpFileThatPredatesTheRequestIsNoAnswerUntilItChanges) {
  // The user's own dump path, or a dump NCCL's own timeout left earlier in the attempt.
  const std::string dir = ::testing::TempDir() + "fr-old-" + std::to_string(::getpid());
  fs::create_directories(dir);
  const std::string file = dir + "/nccl_trace_rank_0";
  std::ofstream(file) << "an earlier dump";
  const std::chrono::steady_clock::time_point t0{std::chrono::hours(1)};
  DumpFileWatch watch(file);
  EXPECT_FALSE(watch.settled(t0, 3s));
  EXPECT_FALSE(watch.settled(t0 + 10s, 3s)) << "unchanged since the request";
  EXPECT_FALSE(watch.written());
  EXPECT_TRUE(watch.onlyOlder());
  std::ofstream(file) << "this hang's dump, longer";
  EXPECT_FALSE(watch.settled(t0 + 11s, 3s));
  EXPECT_TRUE(watch.settled(t0 + 14s, 3s));
  EXPECT_TRUE(watch.written());
  fs::remove_all(dir);
}

TEST(FlightRecorder, PointsTheDumpsIntoTheRanksDirectoryUnlessTheUserDid) {
  const auto none = [](const char*) -> std::optional<std::string> { return std::nullopt; };
  const auto files = flightRecorderFiles("/logs/run/attempt_2/1", 5, none);
  EXPECT_EQ(files.dumpFile, "/logs/run/attempt_2/1/nccl_trace_rank_5");
  EXPECT_EQ(files.pipeFile, "/logs/run/attempt_2/1/nccl_dump_rank_5.pipe");
  auto env = flightRecorderEnvironment(files, none);
  EXPECT_EQ(env["TORCH_FR_DUMP_TEMP_FILE"], "/logs/run/attempt_2/1/nccl_trace_rank_");
  EXPECT_EQ(env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"], "/logs/run/attempt_2/1/nccl_trace_rank_");
  EXPECT_EQ(env["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"], "/logs/run/attempt_2/1/nccl_dump_rank_");
  EXPECT_EQ(env["TORCH_NCCL_TRACE_BUFFER_SIZE"], "2000") << "torch makes the pipe only with a trace buffer";
  EXPECT_EQ(env["TORCH_NCCL_DUMP_ON_TIMEOUT"], "1");
  // The user's own choices stand, and the dumps are looked for where they said.
  const auto user = [](const char* name) -> std::optional<std::string> {
    if (std::string(name) == "TORCH_NCCL_DEBUG_INFO_TEMP_FILE") return "/scratch/fr_";
    if (std::string(name) == "TORCH_FR_BUFFER_SIZE") return "20000";
    return std::nullopt;
  };
  const auto theirs = flightRecorderFiles("/logs/run/attempt_2/1", 5, user);
  EXPECT_EQ(theirs.dumpFile, "/scratch/fr_5");
  env = flightRecorderEnvironment(theirs, user);
  EXPECT_EQ(env.count("TORCH_FR_DUMP_TEMP_FILE"), 0u);
  EXPECT_EQ(env.count("TORCH_NCCL_TRACE_BUFFER_SIZE"), 0u);
  EXPECT_EQ(env["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"], "/logs/run/attempt_2/1/nccl_dump_rank_");
}

TEST(FlightRecorder, APokeNeverBlocksAndOnlyReachesAFifoWithAReader) {
  const std::string dir = ::testing::TempDir() + "fr-poke-" + std::to_string(::getpid());
  fs::create_directories(dir);
  EXPECT_FALSE(pokeDumpPipe(dir + "/missing.pipe"));
  ASSERT_EQ(::mkfifo((dir + "/unread.pipe").c_str(), 0600), 0);
  EXPECT_FALSE(pokeDumpPipe(dir + "/unread.pipe")) << "no reader: ENXIO at once, not a wait";
  std::ofstream(dir + "/regular.pipe") << "";
  EXPECT_FALSE(pokeDumpPipe(dir + "/regular.pipe"));
  EXPECT_EQ(fs::file_size(dir + "/regular.pipe"), 0u) << "a regular file in its place is left alone";
  const int reader = torchPipe(dir + "/rank.pipe");
  ASSERT_GE(reader, 0);
  EXPECT_TRUE(pokeDumpPipe(dir + "/rank.pipe"));
  char byte = 0;
  EXPECT_EQ(::read(reader, &byte, 1), 1);
  ::close(reader);
  const std::chrono::steady_clock::time_point t0{std::chrono::hours(1)};
  DumpFileWatch watch(dir + "/dump");
  EXPECT_FALSE(watch.settled(t0, 3s));
  EXPECT_FALSE(watch.settled(t0 + 5s, 3s)) << "no file";
  std::ofstream(dir + "/dump") << "";
  EXPECT_FALSE(watch.settled(t0 + 6s, 3s));
  EXPECT_FALSE(watch.settled(t0 + 10s, 3s)) << "an empty file is no dump";
  std::ofstream(dir + "/dump") << "partial";
  EXPECT_FALSE(watch.settled(t0 + 11s, 3s)) << "first sight of this content";
  EXPECT_FALSE(watch.settled(t0 + 13s, 3s));
  EXPECT_TRUE(watch.settled(t0 + 14s, 3s)) << "unchanged for 3 s";
  EXPECT_TRUE(watch.written());
  // A rewrite of the same size is seen by its modification time.
  struct timespec times[2] = {{0, UTIME_OMIT}, {12345, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, (dir + "/dump").c_str(), times, 0), 0);
  EXPECT_FALSE(watch.settled(t0 + 15s, 3s)) << "rewritten";
  EXPECT_TRUE(watch.settled(t0 + 18s, 3s));
  // A dump replaced by another file (a new inode) starts over too.
  std::ofstream(dir + "/dump.new") << "partial";
  fs::rename(dir + "/dump.new", dir + "/dump");
  EXPECT_FALSE(watch.settled(t0 + 19s, 3s));
  EXPECT_EQ(dumpKeyValue(1).size(), sizeof(int));
  fs::remove_all(dir);
}

TEST(WorkerWatch, ARankHeldBackByTheConsoleIsNotHung) {
  // Rank 1 waits in write(2) for a console that does not read; rank 0 waits for rank 1 in a collective.
  Harness h({"gloo-reducer-finalize-backward", "python-time-sleep"});
  h.start();
  h.report(0, 0);
  h.report(1, 0);
  h.step();
  h.group.held.insert(1);
  h.stepUntil([&] { return h.saw("hang"); }, 60s);
  EXPECT_FALSE(h.saw("hang")) << "a minute held by the console";
  // The console reads again, and the rank really is stuck: found a timeout later, not at once.
  h.group.held.clear();
  const auto took = h.stepUntil([&] { return h.saw("hang"); }, 30s);
  EXPECT_GE(took, 5000ms) << "the time it was held does not count";
  EXPECT_LE(took, 5600ms);
}

TEST(WorkerWatch, OnSeveralNodesEveryLocalRankInACollectiveWaitsForTheOthersAgent) {
  Harness h({"gloo-barrier", "gloo-reducer-finalize-backward"}, false, /*multiNode=*/true);
  h.start();
  h.report(0, 0);
  h.report(1, 0);
  h.step();
  h.stepUntil([&] { return h.saw("hang"); }, 60s);
  EXPECT_FALSE(h.saw("hang"));
  EXPECT_EQ(h.evidence.collections, 11) << "looked again every timeout, from 5 s to 60 s";
}

}  // namespace
}  // namespace ddprun::launcher
