// The hang rule on recorded evidence: stacks that eu-stack saved of real python3-torch ranks (Gloo waits,
// time.sleep, an evaluation, torch.save, a DataLoader's queue), GPU stacks as public NCCL hang reports show them,
// and /proc counters of real ranks laid out in a fake /proc tree. No processes, no sleeps.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "launcher/watch/evidence/activity_monitor.hpp"
#include "launcher/watch/evidence/process_activity.hpp"
#include "launcher/watch/evidence/stack_text.hpp"
#include "launcher/watch/hang_rule.hpp"

namespace ddprun::launcher {
namespace {
namespace fs = std::filesystem;
using namespace std::chrono_literals;

/// A recorded stack dump (tests/data/stacks/NAME.txt) and the pid of its main thread.
struct Recorded {
  std::string text;
  pid_t pid = 0;
};

Recorded recorded(const std::string& name) {
  std::ifstream in(std::string(DDPRUN_SOURCE_DIR) + "/tests/data/stacks/" + name + ".txt");
  std::stringstream text;
  text << in.rdbuf();
  Recorded r{text.str(), 0};
  std::smatch pid;
  if (std::regex_search(r.text, pid, std::regex(R"(PID (\d+) - process|\(LWP (\d+)\))"))) {
    r.pid = std::stoi(pid[1].matched ? pid[1].str() : pid[2].str());
  }
  return r;
}

MainThread thread(const std::string& name) {
  const Recorded r = recorded(name);
  return classifyMainThread(r.text, r.pid);
}

// --- where a main thread is -------------------------------------------------------------------------------

TEST(StackText, RecordedPythonRanksAreClassifiedByWhereTheirMainThreadIs) {
  EXPECT_EQ(thread("gloo-reducer-finalize-backward").place, MainThreadPlace::kCollective);
  EXPECT_EQ(thread("gloo-reducer-finalize-backward").frame,
            "c10d::Reducer::finalize_backward() (libtorch_cpu.so.1.13.0)");
  EXPECT_EQ(thread("gloo-barrier").place, MainThreadPlace::kCollective);
  EXPECT_EQ(thread("python-time-sleep").place, MainThreadPlace::kOther);
  EXPECT_EQ(describe(thread("python-time-sleep")),
            "clock_nanosleep (C library) under PyObject_Vectorcall (python3.11)");
  EXPECT_EQ(thread("python-eval-compute").place, MainThreadPlace::kOther);
  EXPECT_EQ(thread("python-torch-save").place, MainThreadPlace::kOther);
  EXPECT_EQ(thread("python-dataloader-queue").place, MainThreadPlace::kOther);
  EXPECT_EQ(thread("python-dataloader-queue").blockedIn, "__poll");
}

TEST(StackText, ARankInItsExitPathIsExitingEvenInsideACollective) {
  // python3-torch rank 1 of 2 whose atexit handler waits in dist.barrier() (Gloo) under Py_FinalizeEx: the shape of a
  // stock script tearing down its process group as the interpreter exits, after its peer has gone.
  const MainThread exiting = thread("python-exit-gloo-barrier");
  EXPECT_EQ(exiting.place, MainThreadPlace::kExiting);
  EXPECT_EQ(describe(exiting),
            "c10d::Work::wait(std::chrono::duration<long, std::ratio<1l, 1000l> >) (libtorch_cpu.so.1.13.0)");
  // The C++ worker's static destructors under exit(3), and a frame that only sounds like it.
  const std::string cpp =
      "TID 7:\n#0  0x1 __poll - /usr/lib/libc.so.6\n#1  0x2 gloo::transport::tcp::Loop::~Loop() - /usr/lib/libgloo.so\n"
      "#2  0x3 __run_exit_handlers - /usr/lib/libc.so.6\n#3  0x4 exit - /usr/lib/libc.so.6\n";
  EXPECT_EQ(classifyMainThread(cpp, 7).place, MainThreadPlace::kExiting);
  const std::string notExit =
      "TID 8:\n#0  0x1 __poll - /usr/lib/libc.so.6\n#1  0x2 gloo::transport::tcp::Loop::run() - /usr/lib/libgloo.so\n"
      "#2  0x3 train_and_exit - /usr/bin/worker\n";
  EXPECT_EQ(classifyMainThread(notExit, 8).place, MainThreadPlace::kCollective);
}

TEST(StackText, GpuRanksWaitingInNcclOrForTheirDevice) {
  // torch 2.x creating an NCCL communicator inside ProcessGroupNCCL::recv: a collective, though the innermost
  // frames are libc's usleep.
  const MainThread nccl = thread("nccl-comm-init-recv");
  EXPECT_EQ(nccl.place, MainThreadPlace::kCollective);
  // .item() on a GPU whose stream waits in an NCCL kernel: the CPU spins in libcuda under cudaMemcpyAsync.
  const MainThread item = thread("cuda-item-memcpy");
  EXPECT_EQ(item.place, MainThreadPlace::kGpu);
  EXPECT_EQ(item.frame, "cudaMemcpyAsync () (libcudart.so.11.0)");
}

TEST(StackText, QuotesTheInnermostFrameOfTheMainThreadOutsideTheCRuntime) {
  const std::string eu =
      "PID 4157 - process\n"
      "TID 4157:\n"
      "#0  0x00007f863faf1df2 pause - /usr/lib/x86_64-linux-gnu/libc.so.6\n"
      "#1  0x000055b3d474e147 ddprun::worker::FaultInjector::beforeStep(long) const - /work/build/bin/worker\n"
      "#2  0x000055b3d472afa8 ddprun::worker::Trainer::trainEpoch() - /work/build/bin/worker\n"
      "TID 4162:\n"
      "#0  0x00007f863fb1a26f __poll - /usr/lib/x86_64-linux-gnu/libc.so.6\n"
      "#1  0x00007f8644480c61 gloo::something() - /usr/lib/libgloo.so\n";
  EXPECT_EQ(innermostNativeFrame(eu, 4157), "ddprun::worker::FaultInjector::beforeStep(long) const (worker)");
  EXPECT_EQ(innermostNativeFrame(eu, 4162), "gloo::something() (libgloo.so)");
  EXPECT_EQ(innermostNativeFrame(eu, 1), "");
  EXPECT_EQ(classifyMainThread(eu, 4157).place, MainThreadPlace::kOther);
  EXPECT_EQ(classifyMainThread(eu, 4162).place, MainThreadPlace::kCollective);
  EXPECT_EQ(classifyMainThread(eu, 1).place, MainThreadPlace::kUnknown);
  const std::string unnamed =
      "TID 9:\n#0  0x1 __nanosleep - /usr/lib/libc.so.6\n#1  0x2 - /usr/bin/python3.11\n"
      "#2  0x3 _PyEval_EvalFrameDefault - /usr/bin/python3.11\n";
  EXPECT_EQ(innermostNativeFrame(unnamed, 9), "_PyEval_EvalFrameDefault (python3.11)");
  const std::string python =
      "Fatal Python error: Aborted\n\nThread 0x00007f1 (most recent call first):\n  File \"t.py\", line 9 in worker\n\n"
      "Current thread 0x00007f2 (most recent call first):\n  File \"train.py\", line 46 in main\n"
      "  File \"train.py\", line 59 in <module>\n";
  EXPECT_EQ(innermostPythonFrame(python), "File \"train.py\", line 46 in main");
  EXPECT_EQ(innermostPythonFrame("no dump"), "");
}

TEST(StackText, TellsARankWaitingInACollectiveFromOneStuckInItsOwnCode) {
  // Frames as ddprun quotes them from real hangs: the C++ worker over shm and Gloo, python3-torch DDP.
  EXPECT_TRUE(waitsInCollective("ddprun::worker::CollectiveQueue::wait(unsigned long) (worker)", ""));
  EXPECT_TRUE(waitsInCollective("ddprun::worker::ShmGroup::waitFor(int, unsigned int) (worker)", ""));
  EXPECT_TRUE(waitsInCollective("c10d::Reducer::finalize_backward() (libtorch_cpu.so.1.13.0)",
                                "File \"train.py\", line 30 in main"));
  EXPECT_TRUE(
      waitsInCollective("gloo::transport::tcp::UnboundBuffer::waitRecv(int*, std::chrono::duration<long, "
                        "std::ratio<1l, 1000l> >) (libgloo.so)",
                        ""));
  EXPECT_TRUE(waitsInCollective(
      "", "File \"/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py\", line 1536 in all_reduce"));
  EXPECT_FALSE(waitsInCollective("ddprun::worker::FaultInjector::beforeStep(long) const (worker)", ""));
  EXPECT_FALSE(waitsInCollective("_PyEval_EvalFrameDefault (python3.11)", "File \"train.py\", line 28 in main"));
  EXPECT_FALSE(waitsInCollective("", ""));
}

// --- what a rank's processes do (/proc) -------------------------------------------------------------------

/// A fake /proc with the files readProcessTree reads, filled from a real rank's counters.
class FakeProc {
 public:
  FakeProc() : root_(::testing::TempDir() + "fakeproc-" + std::to_string(::getpid()) + "-" + std::to_string(next_++)) {
    fs::create_directories(root_);
  }
  ~FakeProc() { fs::remove_all(root_); }
  const std::string& root() const { return root_; }

  /// Process `pid` with `ticks` of user+system time, I/O counters, main-thread state and children.
  void process(pid_t pid, long utime, long stime, char state, uint64_t rchar, uint64_t writeBytes,
               std::vector<pid_t> children = {}, const std::string& syscall = "running",
               const std::string& stdin_ = "/dev/pts/3") {
    const std::string dir = root_ + "/" + std::to_string(pid);
    fs::create_directories(dir + "/task/" + std::to_string(pid));
    fs::create_directories(dir + "/fd");
    // A real line of a python3-torch rank, with its times and state replaced.
    const std::string stat = std::to_string(pid) + " (python3) " + state + " 1 6683 1299 0 -1 4194560 33112 0 5 0 " +
                             std::to_string(utime) + " " + std::to_string(stime) + " 0 0 20 0 7 0 1 0\n";
    std::ofstream(dir + "/stat") << stat;
    std::ofstream(dir + "/task/" + std::to_string(pid) + "/stat") << stat;
    std::ofstream(dir + "/task/" + std::to_string(pid) + "/syscall") << syscall << "\n";
    std::string list;
    for (pid_t child : children) list += std::to_string(child) + " ";
    std::ofstream(dir + "/task/" + std::to_string(pid) + "/children") << list;
    std::ofstream(dir + "/io") << "rchar: " << rchar
                               << "\nwchar: 0\nsyscr: 1\nsyscw: 1\nread_bytes: 1867776\nwrite_bytes: " << writeBytes
                               << "\ncancelled_write_bytes: 4096\n";
    fs::remove(dir + "/fd/0");
    fs::create_symlink(stdin_, dir + "/fd/0");
  }

 private:
  static inline int next_ = 0;
  std::string root_;
};

TEST(ProcessActivity, ReadsARankAndTheProcessesItStarted) {
  FakeProc proc;
  proc.process(6984, 2000, 500, 'S', 1000, 16384, {7000, 7002});  // a DataLoader's main process
  proc.process(7000, 2000, 1400, 'R', 0, 0);                      // its workers
  proc.process(7002, 2900, 1500, 'R', 0, 0);
  const ActivityCounters c = readProcessTree(6984, proc.root());
  EXPECT_EQ(c.processes, 3);
  EXPECT_EQ(c.runnable, 2) << "the two workers compute";
  EXPECT_NEAR(c.cpuSeconds, (2500 + 3400 + 4400) / static_cast<double>(::sysconf(_SC_CLK_TCK)), 1e-9);
  EXPECT_EQ(c.mainThreadState, 'S');
  EXPECT_FALSE(c.waitsForInput);
  EXPECT_EQ(readProcessTree(99999, proc.root()).processes, 0) << "a rank that is gone counts as nothing";
}

TEST(ProcessActivity, TheSamplerLooksForNewProcessesOnlyEveryFewSeconds) {
  FakeProc proc;
  proc.process(6984, 100, 0, 'S', 0, 0);
  ProcessTreeSampler sampler(proc.root(), 2000ms);
  const auto t0 = std::chrono::steady_clock::time_point{} + 1000s;
  EXPECT_EQ(sampler.sample(6984, t0).processes, 1);
  proc.process(6984, 100, 0, 'S', 0, 0, {7000});  // a DataLoader worker starts
  proc.process(7000, 500, 0, 'R', 0, 0);
  EXPECT_EQ(sampler.sample(6984, t0 + 500ms).processes, 1) << "its members are not looked for again yet";
  const ActivityCounters later = sampler.sample(6984, t0 + 2000ms);
  EXPECT_EQ(later.processes, 2);
  EXPECT_EQ(later.runnable, 1);
  EXPECT_NEAR(later.cpuSeconds, 600 / static_cast<double>(::sysconf(_SC_CLK_TCK)), 1e-9);
}

TEST(ProcessActivity, ARankReadingItsConsoleWaitsForAPerson) {
  FakeProc proc;
  // Recorded: input() on a terminal blocks in read(0, …); pdb (readline) in pselect6 on fd 0 alone.
  proc.process(7402, 10, 1, 'S', 0, 0, {},
               "0 0x0 0x7f62d23d9b03 0x1 0x7f62d220f0e0 0x1 0x0 0x7ffc77ef0f58 0x7f62d22fe2ad");
  EXPECT_TRUE(readProcessTree(7402, proc.root()).waitsForInput);
  proc.process(7399, 10, 1, 'S', 0, 0, {}, "270 0x1 0x7ffda17113b0 0x0 0x0 0x0 0x0 0x7ffda1711320 0x7f3f33225954");
  EXPECT_TRUE(readProcessTree(7399, proc.root()).waitsForInput);
  // time.sleep (clock_nanosleep), a socket read on fd 12, and stdin from /dev/null are not.
  proc.process(6689, 10, 1, 'S', 0, 0, {}, "230 0x1 0x1 0x7fff6ca89550 0x0 0x0 0x0 0x7fff6ca89510 0x7f70ab3d7545");
  EXPECT_FALSE(readProcessTree(6689, proc.root()).waitsForInput);
  proc.process(6690, 10, 1, 'S', 0, 0, {}, "0 0xc 0x7f62d23d9b03 0x1 0x0 0x0 0x0 0x0 0x0");
  EXPECT_FALSE(readProcessTree(6690, proc.root()).waitsForInput);
  proc.process(6691, 10, 1, 'S', 0, 0, {}, "0 0x0 0x7f62d23d9b03 0x1 0x0 0x0 0x0 0x0 0x0", "/dev/null");
  EXPECT_FALSE(readProcessTree(6691, proc.root()).waitsForInput);
}

TEST(ActivityMonitor, IdleRanksShowOnlyTheirBackgroundThreads) {
  // Counters of two real ranks a second apart (python3-torch, Gloo): rank 1 in time.sleep used 1.5 ticks a
  // second (its background threads); rank 0 computing used a whole core.
  using Time = ActivityMonitor::Time;
  const Time t0 = Time{} + 1000s;
  ActivityMonitor activity;
  activity.startAttempt(2, t0);
  activity.progressed(0, t0 + 1s);
  activity.progressed(1, t0 + 1s);
  ActivityCounters idle{2.08, 1000, 1884160, 1, 0, 'S', false};
  ActivityCounters busy{3.00, 1000, 1884160, 1, 0, 'S', false};
  activity.observe(0, busy, t0 + 2s);  // baselines
  activity.observe(1, idle, t0 + 2s);
  for (int second = 3; second <= 9; ++second) {
    busy.cpuSeconds += 1.0;
    idle.cpuSeconds += 0.015;
    activity.observe(0, busy, t0 + std::chrono::seconds(second));
    activity.observe(1, idle, t0 + std::chrono::seconds(second));
  }
  EXPECT_DOUBLE_EQ(activity.idleSeconds(0), 0);
  EXPECT_DOUBLE_EQ(activity.idleSeconds(1), 8) << "idle since its last step";
  EXPECT_NEAR(*activity.cpuShare(1), 0.015, 1e-9);
  // Writing a checkpoint moves bytes to storage: work, whatever the CPU.
  ActivityCounters writing = idle;
  writing.storageBytes += 4096;
  activity.observe(1, writing, t0 + 10s);
  EXPECT_DOUBLE_EQ(activity.idleSeconds(1), 0);
  // On a crowded machine a computing rank may get 2 % of a core, but it is runnable (state R): work.
  ActivityCounters starved = writing;
  starved.cpuSeconds += 0.02;
  starved.runnable = 1;
  activity.observe(0, starved, t0 + 10s);
  activity.observe(0, starved, t0 + 11s);
  EXPECT_DOUBLE_EQ(activity.idleSeconds(0), 0);
  // A pause (Ctrl-Z) is nobody's idleness, and the next sample after it is only a baseline.
  activity.shiftForPause(t0 + 10s, t0 + 100s);
  EXPECT_DOUBLE_EQ(activity.idleSeconds(1), 0);
  ActivityCounters afterPause = writing;
  afterPause.cpuSeconds += 50;  // what the pause's interval would wrongly show
  activity.observe(1, afterPause, t0 + 101s);
  EXPECT_DOUBLE_EQ(activity.idleSeconds(1), 1);
  // A rank stopped by a person (SIGSTOP, a debugger) stays stopped across ddprun's own look at the stacks, which is
  // shifted out like a pause: the verdict right after the look must still see it (it used to see no state at all
  // and take the frozen rank for one waiting in a collective).
  ActivityCounters frozen = afterPause;
  frozen.mainThreadState = 'T';
  activity.observe(1, frozen, t0 + 102s);
  EXPECT_TRUE(activity.stopped(1));
  activity.shiftForPause(t0 + 102s, t0 + 104s);
  EXPECT_TRUE(activity.stopped(1)) << "the look changed nothing about the rank";
  EXPECT_FALSE(activity.stopped(0));
}

TEST(ActivityMonitor, WhatWasNotSeenIsNotIdle) {
  // Idleness is measured to the latest sample, never to the present: a rank the watch could not read for a while (a
  // loaded machine, a read that got stuck) is not idle for that while. Nor before its first sample, unless that came
  // within a second of its last step (the watch samples a rank only once it has been quiet half a second).
  using Time = ActivityMonitor::Time;
  const Time t0 = Time{} + 1000s;
  ActivityMonitor activity;
  activity.startAttempt(2, t0);
  activity.progressed(0, t0);
  activity.progressed(1, t0);
  ActivityCounters idle;
  idle.mainThreadState = 'S';
  activity.observe(0, idle, t0 + 500ms);
  activity.observe(0, idle, t0 + 1s);
  EXPECT_DOUBLE_EQ(activity.idleSeconds(0), 1) << "from its step: the baseline came half a second after it";
  EXPECT_DOUBLE_EQ(activity.idleSeconds(0), 1) << "however late it is now";
  activity.observe(1, idle, t0 + 4s);  // the agent was starved: its first look came 4 s after the step
  activity.observe(1, idle, t0 + 5s);
  EXPECT_DOUBLE_EQ(activity.idleSeconds(1), 1) << "seen idle for 1 s, not 5";
}

TEST(ActivityMonitor, AStarvedComputationIsWork) {
  // Two busy loops per core: a DataLoader worker that computes gets 2 % of a core and is not runnable at the instant
  // of the sample, but its main thread runs in long slices and waited 40 % of the interval for a CPU.
  using Time = ActivityMonitor::Time;
  const Time t0 = Time{} + 1000s;
  ActivityMonitor activity;
  activity.startAttempt(1, t0);
  activity.progressed(0, t0);
  ActivityCounters c;
  c.mainThreadState = 'S';
  activity.observe(0, c, t0 + 500ms);
  for (int i = 1; i <= 10; ++i) {
    c.cpuSeconds += 0.01;
    c.computeDelaySeconds += 0.2;
    activity.observe(0, c, t0 + 500ms + i * 500ms);
  }
  EXPECT_DOUBLE_EQ(activity.idleSeconds(0), 0);
  EXPECT_TRUE(activity.starved(0));
  // A deadlocked rank on the same machine: Gloo's threads wake for microseconds and wait long for a CPU each time,
  // but no computing process waits (their delay is not counted): idle.
  for (int i = 11; i <= 20; ++i) {
    c.cpuSeconds += 0.001;
    activity.observe(0, c, t0 + 500ms + i * 500ms);
  }
  EXPECT_DOUBLE_EQ(activity.idleSeconds(0), 5);
  EXPECT_FALSE(activity.starved(0));
}

TEST(ActivityMonitor, AMainThreadThatKeepsWakingUpPolls) {
  using Time = ActivityMonitor::Time;
  const Time t0 = Time{} + 1000s;
  ActivityMonitor activity;
  activity.startAttempt(2, t0);
  activity.progressed(0, t0);
  activity.progressed(1, t0);
  ActivityCounters poll, blocked;
  poll.mainThreadState = blocked.mainThreadState = 'S';
  poll.mainThreadRuns = blocked.mainThreadRuns = 500;
  blocked.mainThreadRuns += 3;  // it ran a little after its last step, then blocked in one call
  activity.observe(0, poll, t0 + 500ms);
  activity.observe(1, blocked, t0 + 500ms);
  for (int i = 1; i <= 10; ++i) {
    if (i % 2 == 0) ++poll.mainThreadRuns;  // `while not exists(f): time.sleep(1)`: once a second
    activity.observe(0, poll, t0 + 500ms + i * 500ms);
    activity.observe(1, blocked, t0 + 500ms + i * 500ms);
  }
  EXPECT_TRUE(activity.polls(0, 5));
  EXPECT_FALSE(activity.polls(1, 5)) << "time.sleep(3600), a lock, a blocked read: no wake-ups";
  EXPECT_DOUBLE_EQ(activity.idleSeconds(0), 5.5) << "a poll is idle all the same (the idle timeout applies)";
  // Its last wake-up long ago: it no longer polls.
  for (int i = 11; i <= 30; ++i) activity.observe(0, poll, t0 + 500ms + i * 500ms);
  EXPECT_FALSE(activity.polls(0, 5));
}

// --- the rule ---------------------------------------------------------------------------------------------

Suspicion suspicion(double stalled, double timeout = 5) {
  Suspicion s;
  s.ranks = {0, 1};
  s.stalledSeconds = stalled;
  s.timeoutSeconds = timeout;
  s.lastStep = 30;
  return s;
}

RankEvidence rank(size_t local, const std::string& stacks, double idleSeconds, double cpu) {
  RankEvidence e;
  e.localRank = local;
  e.globalRank = static_cast<int>(local);
  e.idleSeconds = idleSeconds;
  // Unless a test says otherwise, nothing of the rank moved apart from what made it work: its communication, its
  // main thread and its I/O have been as idle as the rank.
  e.quietSeconds = e.mainIdleSeconds = e.ioIdleSeconds = idleSeconds;
  e.cpuShare = cpu;
  if (cpu >= 0.05) e.workedShare = cpu;
  e.mainThread = thread(stacks);
  return e;
}

TEST(HangRule, ARankAsleepOutsideCollectivesWhileItsPeerWaitsIsAHang) {
  // The pattern of watch_patterns.py --pattern hang: rank 1 in time.sleep, rank 0 in DDP's backward.
  const auto s = suspicion(5.2);
  const std::vector<RankEvidence> ranks{rank(0, "gloo-reducer-finalize-backward", 5.2, 0.01),
                                        rank(1, "python-time-sleep", 5.2, 0.015)};
  const Judgement j = judgeHang(s, ranks, {});
  ASSERT_EQ(j.verdict, Verdict::kHung);
  EXPECT_EQ(j.culprits, std::vector<size_t>{1});
  const std::string text = describeHang(s, ranks, j, {});
  EXPECT_NE(text.find("rank 1's main thread is in clock_nanosleep"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 0 waits in a collective (c10d::Reducer::finalize_backward()"), std::string::npos) << text;
  EXPECT_NE(text.find("hang timeout 5.0 s (the floor, --hang-min-timeout"), std::string::npos) << text;
  EXPECT_NE(hangHint(s).find("announce"), std::string::npos);
}

TEST(HangRule, ARankSeenEnteringItsCollectiveWaitsThereATimeoutBeforeItCounts) {
  // Every rank paused 20 s (time.sleep); rank 0 woke first and entered DDP's backward, with a compute too short for
  // the CPU clock, so it looks idle since before the pause. A look of this suspicion saw it arrive 0.5 s ago: its
  // peer may be a moment from waking (a loaded machine wakes sleepers late). Not a hang, until it waited a timeout.
  const auto s = suspicion(22, 2);
  std::vector<RankEvidence> ranks{rank(0, "gloo-reducer-finalize-backward", 20.5, 0.0),
                                  rank(1, "python-time-sleep", 20.5, 0.0)};
  ranks[0].inPlaceSeconds = 0.5;
  EXPECT_NE(judgeHang(s, ranks, {}).verdict, Verdict::kHung);
  ranks[0].inPlaceSeconds = 2.1;
  const Judgement j = judgeHang(s, ranks, {});
  EXPECT_EQ(j.verdict, Verdict::kHung);
  EXPECT_EQ(j.culprits, std::vector<size_t>{1});
}

TEST(HangRule, HealthyJobsThatStopSteppingAreNotHangs) {
  const auto s = suspicion(6);
  // 1. Every rank evaluates (unannounced): both compute.
  EXPECT_EQ(judgeHang(s, {rank(0, "python-eval-compute", 0, 1.0), rank(1, "python-eval-compute", 0, 0.98)}, {}).verdict,
            Verdict::kWorking);
  // 2. Rank 0 evaluates while rank 1 waits in dist.barrier(): rank 1 only waits; rank 0 works.
  auto j = judgeHang(s, {rank(0, "python-eval-compute", 0, 1.0), rank(1, "gloo-barrier", 6, 0.01)}, {});
  EXPECT_EQ(j.verdict, Verdict::kWorking);
  EXPECT_EQ(j.working, std::vector<size_t>{0});
  // 3. Rank 0 writes a checkpoint (torch.save) while rank 1 waits in a barrier.
  EXPECT_EQ(judgeHang(s, {rank(0, "python-torch-save", 0, 0.7), rank(1, "gloo-barrier", 6, 0.01)}, {}).verdict,
            Verdict::kWorking);
  // 4. DataLoader workers start: the main threads wait on the loader's queue, the workers (children) compute.
  EXPECT_EQ(judgeHang(s, {rank(0, "python-dataloader-queue", 0, 1.9), rank(1, "python-dataloader-queue", 0, 1.8)}, {})
                .verdict,
            Verdict::kWorking);
  // pdb on rank 0: a person is at the keyboard.
  RankEvidence pdb = rank(0, "python-time-sleep", 600, 0);
  pdb.waitsForInput = true;
  EXPECT_EQ(judgeHang(s, {pdb, rank(1, "gloo-barrier", 600, 0)}, {}).verdict, Verdict::kWorking);
  // Rank 1 stopped (kill -STOP, or gdb at a breakpoint) in a collective, rank 0 waiting for it: a person's doing too,
  // until the busy timeout.
  RankEvidence stopped = rank(1, "gloo-barrier", 600, 0);
  stopped.stopped = true;
  const auto held = judgeHang(s, {rank(0, "gloo-barrier", 600, 0), stopped}, {});
  EXPECT_EQ(held.verdict, Verdict::kWorking);
  EXPECT_EQ(held.working, std::vector<size_t>{1});
  EXPECT_NE(describeRank(stopped, 6).find("rank 1 is stopped"), std::string::npos);
  RankEvidence stoppedInOwnCode = rank(0, "python-time-sleep", 600, 0);
  stoppedInOwnCode.stopped = true;
  EXPECT_EQ(judgeHang(s, {stoppedInOwnCode, rank(1, "gloo-barrier", 600, 0)}, {}).verdict, Verdict::kWorking)
      << "not a culprit to replace or kill";
  EXPECT_EQ(judgeHang(suspicion(1900), {rank(0, "gloo-barrier", 1900, 0), stopped}, {}).verdict, Verdict::kHung)
      << "the busy timeout still ends it";
}

TEST(HangRule, WaitingRanksSpinningCpuStillOnlyWait) {
  // NCCL's waits spin: its main thread's CPU in a collective is not work. Rank 1 idle outside: a hang.
  RankEvidence spinning = rank(0, "nccl-comm-init-recv", 0, 1.0);
  spinning.quietSeconds = 6;  // no bytes through its sockets, no other thread busy
  const auto j = judgeHang(suspicion(6), {spinning, rank(1, "python-time-sleep", 6, 0)}, {});
  EXPECT_EQ(j.verdict, Verdict::kHung);
  EXPECT_EQ(j.culprits, std::vector<size_t>{1});
}

TEST(HangRule, ACollectiveThatMovesDataIsWorkHoweverLong) {
  // 16 allreduces of 200 MB (Gloo, 2 ranks): both main threads wait in c10d::Work::wait while Gloo's threads send
  // (1-1.5 GB/s each, tens of percent of a core). Long past the floor, and not a hang.
  RankEvidence r0 = rank(0, "gloo-barrier", 30, 0.6);
  RankEvidence r1 = rank(1, "gloo-barrier", 30, 0.6);
  r0.quietSeconds = r1.quietSeconds = 0.4;
  const auto s = suspicion(30);
  const auto j = judgeHang(s, {r0, r1}, {});
  EXPECT_EQ(j.verdict, Verdict::kWorking);
  EXPECT_EQ(j.working, (std::vector<size_t>{0, 1}));
  EXPECT_NE(describeWorking(s, {r0, r1}, j, {}).find("rank 0 is in a collective that moves data"), std::string::npos);
  // Only one side moving is enough: in a broadcast the receiver's bytes move, the sender may be done.
  r0.quietSeconds = 30;
  EXPECT_EQ(judgeHang(s, {r0, r1}, {}).verdict, Verdict::kWorking);
  // Once nothing moves any more, it is the deadlock's signature: every rank in a collective.
  r1.quietSeconds = 30;
  const auto stuck = judgeHang(s, {r0, r1}, {});
  EXPECT_EQ(stuck.verdict, Verdict::kHung);
  EXPECT_NE(describeHang(s, {r0, r1}, stuck, {}).find("rank 0 waits in a collective"), std::string::npos);
  EXPECT_NE(describeHang(s, {r0, r1}, stuck, {}).find("has moved no data for 30.0 s"), std::string::npos);
  // ddprun's shared-memory allreduce copies on the main thread, and its wait sleeps on a futex: main-thread CPU in a
  // Gloo or shm collective is the collective moving; in NCCL's, whose wait spins, it is not.
  const std::string shm =
      "TID 9:\n#0  0x1 ddprun::worker::ShmGroup::allreduce(float*, unsigned long) - /w/worker\n#1  0x2 main - "
      "/w/worker\n";
  RankEvidence copying = r0;
  copying.mainThread = classifyMainThread(shm, 9);
  copying.mainIdleSeconds = 0.2;
  EXPECT_EQ(judgeHang(s, {copying, r1}, {}).verdict, Verdict::kWorking);
  RankEvidence nccl = rank(0, "nccl-comm-init-recv", 30, 1.0);
  nccl.mainIdleSeconds = 0;
  EXPECT_EQ(judgeHang(s, {nccl, r1}, {}).verdict, Verdict::kHung);
}

TEST(HangRule, EveryRankIdleOutsideCollectivesIsNoDeadlockUntilTheIdleTimeout) {
  // Every rank sleep-polls for a data shard (or warms up with time.sleep): nobody waits on a peer.
  const std::vector<RankEvidence> ranks{rank(0, "python-time-sleep", 40, 0.01), rank(1, "python-time-sleep", 40, 0.01)};
  RuleSettings settings;
  settings.idleTimeoutSeconds = 600;
  const auto idle = judgeHang(suspicion(40), ranks, settings);
  EXPECT_EQ(idle.verdict, Verdict::kIdle);
  const std::string line = describeWorking(suspicion(40), ranks, idle, settings);
  EXPECT_NE(line.find("no rank waits in a collective"), std::string::npos) << line;
  EXPECT_NE(line.find("--hang-idle-timeout 600.0 s"), std::string::npos) << line;
  const auto late = judgeHang(suspicion(600), ranks, settings);
  EXPECT_EQ(late.verdict, Verdict::kHung);
  EXPECT_TRUE(late.byIdleTimeout);
  EXPECT_EQ(late.culprits, (std::vector<size_t>{0, 1}));
  EXPECT_NE(describeHang(suspicion(600), ranks, late, settings).find("longer than --hang-idle-timeout"),
            std::string::npos);
  // Before any rank has reported in the attempt only the deadlock's signature counts: no idle timeout.
  settings.unreported = true;
  EXPECT_EQ(judgeHang(suspicion(6000), ranks, settings).verdict, Verdict::kIdle);
  // One rank asleep while the other waits in a collective is the signature, reported or not.
  EXPECT_EQ(
      judgeHang(suspicion(6), {rank(0, "gloo-barrier", 6, 0), rank(1, "python-time-sleep", 6, 0)}, settings).verdict,
      Verdict::kHung);
}

TEST(HangRule, ARankSpinningInOnePlaceWhileItsPeerWaitsIsFoundAfterTheSpinTimeout) {
  // Rank 1 in `while True: pass` (recorded: its main thread in the eval loop, a whole core, no I/O) while rank 0
  // waits in DDP's allreduce.
  RuleSettings settings;
  settings.spinTimeoutSeconds = 60;
  RankEvidence spinner = rank(1, "python-spin", 0, 1.0);  // `while True: pass`: only the interpreter's frames
  ASSERT_TRUE(spinner.mainThread->runsPython);
  spinner.ioIdleSeconds = 61;
  spinner.samePositionSeconds = 56;  // every look since the suspicion began (at the 5 s timeout)
  // Its Python position, read twice a second since the first look: no line or value it had not been at before.
  spinner.python = {PythonPosition::Status::kRead, "File \"train.py\", line 40, in train", "", 55.5, 112, 2};
  const RankEvidence waiter = rank(0, "gloo-reducer-finalize-backward", 61, 0);
  const auto s = suspicion(61);
  // No evidence tells a spin from a long computation for certain: by default it is reported, not a hang.
  const auto reported = judgeHang(s, {waiter, spinner}, settings);
  ASSERT_EQ(reported.verdict, Verdict::kSpinning);
  EXPECT_EQ(reported.spinning, std::vector<size_t>{1});
  const std::string report = describeWorking(s, {waiter, spinner}, reported, settings);
  EXPECT_NE(report.find("rank 1 spins in one place (File \"train.py\", line 40"), std::string::npos) << report;
  EXPECT_NE(report.find("stops the group only after --hang-busy-timeout 1800.0 s (--hang-spin-action restart"),
            std::string::npos)
      << report;
  // Reported, it is still hung at the busy timeout.
  settings.busyTimeoutSeconds = 60;
  const auto busy = judgeHang(s, {waiter, spinner}, settings);
  EXPECT_EQ(busy.verdict, Verdict::kHung);
  EXPECT_TRUE(busy.byBusyTimeout);
  settings.busyTimeoutSeconds = 1800;
  // --hang-spin-action restart: a hang.
  settings.spinIsHang = true;
  const auto j = judgeHang(s, {waiter, spinner}, settings);
  ASSERT_EQ(j.verdict, Verdict::kHung);
  EXPECT_EQ(j.culprits, std::vector<size_t>{1});
  EXPECT_EQ(j.spinning, std::vector<size_t>{1});
  const std::string text = describeHang(s, {waiter, spinner}, j, settings);
  EXPECT_NE(text.find("rank 1 spins in one place (File \"train.py\", line 40, in train, 112 of 112 reads over 55.5 s "
                      "came back to a line and values seen before, 100% of a core, no I/O)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("rank 0 waits in a collective"), std::string::npos) << text;
  // Before the spin timeout it works, and the line says its peer waits meanwhile.
  const auto early = judgeHang(suspicion(30), {waiter, spinner}, settings);
  EXPECT_EQ(early.verdict, Verdict::kWorking);
  EXPECT_NE(
      describeWorking(suspicion(30), {waiter, spinner}, early, settings).find("while rank 0 waits in a collective"),
      std::string::npos);
  // Look-alikes that compute: its main thread moved between looks (an evaluation, a compile), or it reads or
  // writes (a checkpoint), or nobody waits on it.
  RankEvidence moving = spinner;
  moving.python.sameSeconds = 4;  // read for 4 s only
  EXPECT_EQ(judgeHang(s, {waiter, moving}, settings).verdict, Verdict::kWorking);
  // A computation that comes back to some states (a generator's caller between two yields) but reaches new ones in
  // more than a quarter of the reads: not a spin. A loop over 24 states whose last new one came long ago: a spin.
  RankEvidence generator = spinner;
  generator.python.sameReads = 70;
  generator.python.newReads = 40;
  EXPECT_EQ(judgeHang(s, {waiter, generator}, settings).verdict, Verdict::kWorking);
  RankEvidence manyStates = spinner;
  manyStates.python.sameReads = 100;
  manyStates.python.newReads = 12;
  EXPECT_EQ(judgeHang(s, {waiter, manyStates}, settings).spinning, std::vector<size_t>{1});
  // A C++ rank's native stacks that moved between looks: working too.
  RankEvidence nativeMoving = rank(1, "cpp-spin", 0, 1.0);
  nativeMoving.ioIdleSeconds = 61;
  nativeMoving.samePositionSeconds = 4;
  EXPECT_EQ(judgeHang(s, {waiter, nativeMoving}, settings).verdict, Verdict::kWorking);
  RankEvidence writing = spinner;
  writing.ioIdleSeconds = 0.3;
  EXPECT_EQ(judgeHang(s, {waiter, writing}, settings).verdict, Verdict::kWorking);
  RankEvidence otherWorks = rank(0, "python-eval-compute", 0, 1.0);
  EXPECT_EQ(judgeHang(s, {otherWorks, spinner}, settings).verdict, Verdict::kWorking);
  // A loop of matrix products found in the same BLAS kernel look after look (most of its time is there) computes.
  RankEvidence matmuls = rank(1, "python-eval-compute", 0, 1.0);
  matmuls.ioIdleSeconds = spinner.ioIdleSeconds;
  matmuls.samePositionSeconds = spinner.samePositionSeconds;
  EXPECT_EQ(judgeHang(s, {waiter, matmuls}, settings).verdict, Verdict::kWorking);
}

TEST(HangRule, InPythonOnlyTheScriptsPositionTellsASpinFromAComputation) {
  // A pure-Python computation (a metric summed sample by sample) shows the same native stacks look after look: the
  // interpreter's bytecode loop. Its Python position moves; a spin's does not.
  RuleSettings settings;
  settings.spinTimeoutSeconds = 60;
  const RankEvidence waiter = rank(0, "gloo-reducer-finalize-backward", 61, 0);
  const auto s = suspicion(61);
  RankEvidence computing = rank(1, "python-spin", 0, 1.0);
  computing.ioIdleSeconds = 61;
  computing.samePositionSeconds = 56;
  // The last read found it in a new state (its loop variable changed): a computation.
  computing.python = {PythonPosition::Status::kRead, "File \"metrics.py\", line 12, in score", "", 0.0, 1, 1};
  const auto j = judgeHang(s, {waiter, computing}, settings);
  EXPECT_EQ(j.verdict, Verdict::kWorking);
  EXPECT_NE(describeWorking(s, {waiter, computing}, j, settings).find("Python at File \"metrics.py\", line 12"),
            std::string::npos);
  // The same place, but in too few reads (a starved machine read it rarely): not enough to call it a spin.
  RankEvidence fewReads = computing;
  fewReads.python = {PythonPosition::Status::kRead, "File \"wait.py\", line 3, in wait", "", 56, 9, 2};
  EXPECT_EQ(judgeHang(s, {waiter, fewReads}, settings).verdict, Verdict::kWorking);
  // One long call (a sort, a regular expression, str() of a huge int): the same state on one bytecode in every read.
  RankEvidence longCall = computing;
  longCall.python = {PythonPosition::Status::kRead, "File \"metrics.py\", line 20, in report", "", 56, 112, 1};
  EXPECT_EQ(judgeHang(s, {waiter, longCall}, settings).verdict, Verdict::kWorking);
  // `while x < 10: pass`: its native stacks move between the interpreter and the comparison, look after look, but
  // its script loops over a few bytecodes in the same few states: a spin.
  RankEvidence comparing = computing;
  comparing.samePositionSeconds = 3;
  comparing.python = {PythonPosition::Status::kRead, "File \"wait.py\", line 5, in work", "", 56, 112, 4};
  EXPECT_EQ(judgeHang(s, {waiter, comparing}, settings).spinning, std::vector<size_t>{1});
  // `while True: pass` is one instruction, a backward jump, found in the same state in every read: a spin; one long
  // call stays on an instruction that is no jump (above).
  RankEvidence oneJump = longCall;
  oneJump.python.backwardJump = true;
  EXPECT_EQ(judgeHang(s, {waiter, oneJump}, settings).spinning, std::vector<size_t>{1});
  // A read that raced the interpreter is no evidence of one place.
  RankEvidence raced = computing;
  raced.python = {PythonPosition::Status::kMoved, "", "its frames changed", 0, 0, 0};
  EXPECT_EQ(judgeHang(s, {waiter, raced}, settings).verdict, Verdict::kWorking);
  // A Python it cannot read (another version): never a spin, and the line says why and what still applies.
  RankEvidence unreadable = computing;
  unreadable.python = {
      PythonPosition::Status::kUnreadable, "", "CPython 3.12, whose frames ddprun cannot read", 0, 0, 0};
  const auto u = judgeHang(s, {waiter, unreadable}, settings);
  EXPECT_EQ(u.verdict, Verdict::kWorking);
  EXPECT_NE(describeWorking(s, {waiter, unreadable}, u, settings)
                .find("its Python position cannot be read (CPython 3.12, whose frames ddprun cannot read), so a spin "
                      "there is found only by --hang-busy-timeout"),
            std::string::npos);
  // Past the busy timeout it is hung all the same.
  settings.busyTimeoutSeconds = 60;
  EXPECT_EQ(judgeHang(s, {waiter, unreadable}, settings).verdict, Verdict::kHung);
  // A native spin (a C++ worker's loop) needs no Python position: the same stacks are enough.
  RankEvidence native = rank(1, "cpp-spin", 0, 1.0);
  native.ioIdleSeconds = 61;
  native.samePositionSeconds = 56;
  settings.busyTimeoutSeconds = 1800;
  EXPECT_EQ(judgeHang(s, {waiter, native}, settings).spinning, std::vector<size_t>{1});
}

TEST(HangRule, ARankThatPollsWaitsForSomethingElseAndIsJudgedByTheIdleTimeout) {
  // Rank 0 waits for a data file (`while not os.path.exists(f): time.sleep(1)`) while rank 1 waits in a barrier. By
  // native stacks it is the deadlock's signature (rank 0 in clock_nanosleep, rank 1 in a collective), but rank 0's main
  // thread wakes up every second: a wait loop, not one blocked call. No deadlock; hung after the idle timeout.
  RuleSettings settings;
  RankEvidence poller = rank(0, "python-time-sleep", 20, 0.001);
  poller.polls = true;
  const RankEvidence waiter = rank(1, "gloo-barrier", 20, 0);
  const auto s = suspicion(20);
  const auto j = judgeHang(s, {poller, waiter}, settings);
  ASSERT_EQ(j.verdict, Verdict::kIdle);
  EXPECT_EQ(j.polling, std::vector<size_t>{0});
  const std::string text = describeWorking(s, {poller, waiter}, j, settings);
  EXPECT_NE(text.find("rank 0 polls (its main thread keeps waking up in clock_nanosleep"), std::string::npos) << text;
  EXPECT_NE(text.find("hung only after --hang-idle-timeout 600.0 s"), std::string::npos) << text;
  settings.idleTimeoutSeconds = 20;
  const auto late = judgeHang(s, {poller, waiter}, settings);
  ASSERT_EQ(late.verdict, Verdict::kHung);
  EXPECT_TRUE(late.byIdleTimeout);
  EXPECT_EQ(late.culprits, std::vector<size_t>{0});
  // The same stacks without the wake-ups (time.sleep(3600)): the deadlock's signature, a hang at once.
  settings.idleTimeoutSeconds = 600;
  poller.polls = false;
  const auto stuck = judgeHang(s, {poller, waiter}, settings);
  EXPECT_EQ(stuck.verdict, Verdict::kHung);
  EXPECT_FALSE(stuck.byIdleTimeout);
}

TEST(HangRule, ARankWaitingForItsGpuIsGivenTheBenefitOfTheDoubt) {
  const auto s = suspicion(6);
  // Both ranks in .item() with spinning CPUs: their GPUs may be evaluating. Not a hang.
  EXPECT_EQ(judgeHang(s, {rank(0, "cuda-item-memcpy", 0, 1.0), rank(1, "cuda-item-memcpy", 0, 1.0)}, {}).verdict,
            Verdict::kWorking);
  // One rank asleep outside any collective explains the other's wait: its GPU waits for that rank in NCCL.
  const auto j = judgeHang(s, {rank(0, "cuda-item-memcpy", 0, 1.0), rank(1, "python-time-sleep", 6, 0)}, {});
  EXPECT_EQ(j.verdict, Verdict::kHung);
  EXPECT_EQ(j.culprits, std::vector<size_t>{1});
}

TEST(HangRule, EveryRankInACollectiveIsADeadlockOnOneNodeButMaybeAnotherNodesHangOnSeveral) {
  const auto s = suspicion(6);
  const std::vector<RankEvidence> ranks{rank(0, "gloo-barrier", 6, 0), rank(1, "gloo-reducer-finalize-backward", 6, 0)};
  const auto one = judgeHang(s, ranks, {});
  EXPECT_EQ(one.verdict, Verdict::kHung);
  EXPECT_EQ(one.culprits.size(), 2u);
  RuleSettings multi;
  multi.multiNode = true;
  EXPECT_EQ(judgeHang(s, ranks, multi).verdict, Verdict::kWaitingElsewhere);
  EXPECT_EQ(judgeHang(suspicion(1801), ranks, multi).verdict, Verdict::kHung) << "the busy timeout still applies";
}

/// A rank that exited 0 while its peers still ran.
RankEvidence exitedEarly(size_t local) {
  RankEvidence gone;
  gone.localRank = local;
  gone.globalRank = static_cast<int>(local);
  gone.running = false;
  gone.exitedEarly = true;
  return gone;
}

TEST(HangRule, ARankThatExitedEarlyIsTheLikelyCause) {
  RankEvidence spinning = rank(0, "nccl-comm-init-recv", 0, 1.0);
  spinning.quietSeconds = 6;
  const std::vector<RankEvidence> ranks{spinning, exitedEarly(1)};
  const auto j = judgeHang(suspicion(6), ranks, {});
  EXPECT_EQ(j.verdict, Verdict::kHung);
  EXPECT_EQ(j.culprits, std::vector<size_t>{1});
  EXPECT_NE(describeHang(suspicion(6), ranks, j, {}).find("rank 1 exited 0 while its peers still ran"),
            std::string::npos);
}

TEST(HangRule, ARankThatHasJustExitedZeroIsNoCulpritWhileItsPeersMayBeFinishingWithIt) {
  // The end of a healthy job on a loaded machine, after a long unannounced pause (the suspicion is on): rank 0 left
  // the final barrier and exited 0; rank 1 is still in that barrier, not yet scheduled to see it complete.
  RankEvidence gone = exitedEarly(0);
  gone.exitedEarly = false;
  gone.justExited = true;
  const std::vector<RankEvidence> ending{gone, rank(1, "gloo-barrier", 80, 0)};
  const auto j = judgeHang(suspicion(80), ending, {});
  EXPECT_EQ(j.verdict, Verdict::kWorking);
  EXPECT_NE(describeWorking(suspicion(80), ending, j, {})
                .find("rank 0 has just exited 0 (its peers may be finishing a last collective with it), while rank 1 "
                      "waits in a collective"),
            std::string::npos)
      << describeWorking(suspicion(80), ending, j, {});
  // A timeout later rank 1 still waits: rank 0's exit was early, and the cause.
  const std::vector<RankEvidence> later{exitedEarly(0), rank(1, "gloo-barrier", 85, 0)};
  const auto k = judgeHang(suspicion(85), later, {});
  EXPECT_EQ(k.verdict, Verdict::kHung);
  EXPECT_EQ(k.culprits, std::vector<size_t>{0});
}

TEST(HangRule, ARankStillExitingAfterItsPeerEndedIsNoHang) {
  // The end of a healthy job on a busy machine: rank 0 exited 0, rank 1 still tears its process group down under
  // Py_FinalizeEx seconds later. Neither rank 0's exit nor rank 1's collective frames make it a hang.
  const std::vector<RankEvidence> ending{exitedEarly(0), rank(1, "python-exit-gloo-barrier", 6, 0.02)};
  const auto j = judgeHang(suspicion(6), ending, {});
  EXPECT_EQ(j.verdict, Verdict::kWorking);
  EXPECT_EQ(j.working, std::vector<size_t>{1});
  EXPECT_NE(describeWorking(suspicion(6), ending, j, {}).find("rank 1 is exiting (c10d::Work::wait"), std::string::npos)
      << describeWorking(suspicion(6), ending, j, {});
  EXPECT_EQ(judgeHang(suspicion(1800), ending, {}).verdict, Verdict::kHung) << "an exit that never ends, at the busy "
                                                                               "timeout";
  // A peer asleep outside any collective still explains an exiting rank's wait in its last collective.
  const auto held =
      judgeHang(suspicion(6), {rank(0, "python-time-sleep", 6, 0), rank(1, "python-exit-gloo-barrier", 6, 0)}, {});
  EXPECT_EQ(held.verdict, Verdict::kHung);
  EXPECT_EQ(held.culprits, std::vector<size_t>{0});
}

TEST(HangRule, NoRankRunningIsNeverAHang) {
  // The tick right after the last rank exited 0, before the agent acts on the exit (a clean-clone CI run saw
  // "hang: no rank has stepped for 2.2 s" after "all workers exited 0"): the exits decide, also past the busy timeout
  // and with a rank that exited early.
  RankEvidence exited = exitedEarly(1);
  exited.exitedEarly = false;
  for (const double stalled : {6.0, 1800.0}) {
    EXPECT_EQ(judgeHang(suspicion(stalled), {exitedEarly(0), exited}, {}).verdict, Verdict::kNothingRuns) << stalled;
    RuleSettings multiNode;
    multiNode.multiNode = true;
    EXPECT_EQ(judgeHang(suspicion(stalled), {exited}, multiNode).verdict, Verdict::kNothingRuns) << stalled;
  }
}

TEST(HangRule, WorkWithoutAStepForTheBusyTimeoutIsAHangAfterAll) {
  // A rank spinning in a bug outside any collective works forever; after --hang-busy-timeout it is a hang.
  RuleSettings settings;
  settings.busyTimeoutSeconds = 1800;
  const std::vector<RankEvidence> ranks{rank(0, "python-eval-compute", 0, 1.0), rank(1, "gloo-barrier", 1800, 0)};
  EXPECT_EQ(judgeHang(suspicion(1799), ranks, settings).verdict, Verdict::kWorking);
  const auto j = judgeHang(suspicion(1800), ranks, settings);
  EXPECT_EQ(j.verdict, Verdict::kHung);
  EXPECT_TRUE(j.byBusyTimeout);
  EXPECT_EQ(j.culprits, std::vector<size_t>{0});
  EXPECT_NE(describeHang(suspicion(1800), ranks, j, settings).find("--hang-busy-timeout"), std::string::npos);
}

TEST(HangRule, NoVerdictBeforeTheMainThreadsAreLookedAt) {
  RankEvidence unseen;
  unseen.idleSeconds = 6;
  EXPECT_EQ(judgeHang(suspicion(6), {unseen}, {}).verdict, Verdict::kNeedStacks);
  // Without a stack tool every rank is "unknown": judged by its activity alone, and with nobody seen to wait in a
  // collective, by the idle timeout.
  unseen.mainThread = MainThread{};
  EXPECT_EQ(judgeHang(suspicion(6), {unseen}, {}).verdict, Verdict::kIdle);
  EXPECT_EQ(judgeHang(suspicion(600), {unseen}, {}).verdict, Verdict::kHung);
  unseen.idleSeconds = 1;
  EXPECT_EQ(judgeHang(suspicion(6), {unseen}, {}).verdict, Verdict::kWorking);
}

}  // namespace
}  // namespace ddprun::launcher
