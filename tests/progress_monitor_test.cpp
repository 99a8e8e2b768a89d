// Hang and straggler verdicts on a fake clock (no processes, no sleeps), the progress-file parser, and the
// stack dumps' innermost frames.
#include <gtest/gtest.h>

#include "common/progress_file.hpp"
#include "launcher/progress_monitor.hpp"
#include "launcher/stack_collector.hpp"

namespace ddprun::launcher {
namespace {
using namespace std::chrono_literals;

/// A fake clock: a start instant plus seconds.
struct FakeClock {
  SteadyTime start = SteadyTime{} + 1000s;
  SteadyTime at(double seconds) const {
    return start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
  }
};

RankObservation report(int64_t step, std::string phase = "train", std::optional<double> busy = std::nullopt) {
  RankObservation seen;
  ProgressRecord record;
  record.step = step;
  record.phase = std::move(phase);
  record.busySeconds = busy;
  seen.progress = record;
  return seen;
}

RankObservation silent() { return RankObservation{}; }

TEST(ProgressMonitor, AutoArmsAfterTwoReportsAndWaitsFiveTimesTheLongestInterval) {
  FakeClock clock;
  HangSettings hang;
  hang.minTimeoutSeconds = 1;
  ProgressMonitor monitor(hang, {});
  monitor.startAttempt(1, clock.at(0));
  monitor.observe(0, report(0), clock.at(0));
  EXPECT_TRUE(monitor.stalls(clock.at(1000)).empty()) << "one report: not armed";
  monitor.observe(0, report(1), clock.at(0.4));  // one interval of 0.4 s: timeout max(1, 5 x 0.4) = 2 s
  EXPECT_EQ(monitor.autoTimeoutSeconds("train"), 2.0);
  EXPECT_TRUE(monitor.stalls(clock.at(2.3)).empty());
  auto stalls = monitor.stalls(clock.at(2.5));
  ASSERT_EQ(stalls.size(), 1u);
  EXPECT_EQ(stalls[0].step, 1);
  EXPECT_NEAR(stalls[0].silentSeconds, 2.1, 1e-9);
  EXPECT_EQ(stalls[0].timeoutSeconds, 2.0);
  EXPECT_TRUE(monitor.stalls(clock.at(9)).empty()) << "flagged once per attempt";
  // Never below the floor.
  monitor.startAttempt(1, clock.at(10));
  EXPECT_EQ(monitor.autoTimeoutSeconds("train"), 2.0) << "what the job learnt outlives the attempt";
}

TEST(ProgressMonitor, ALongerPhaseIsJudgedByItsOwnHistory) {
  FakeClock clock;
  HangSettings hang;
  hang.minTimeoutSeconds = 1;
  ProgressMonitor monitor(hang, {});
  monitor.startAttempt(1, clock.at(0));
  for (int step = 0; step <= 10; ++step) monitor.observe(0, report(step), clock.at(step * 0.1));
  // Step 10 announces a checkpoint, never seen to finish: not judged, however long it takes.
  monitor.observe(0, report(10, "checkpoint"), clock.at(1.0));
  EXPECT_TRUE(monitor.stalls(clock.at(30)).empty());
  monitor.observe(0, report(11), clock.at(31));  // the checkpoint took 30 s
  EXPECT_EQ(monitor.autoTimeoutSeconds("checkpoint"), 150.0);
  EXPECT_EQ(monitor.autoTimeoutSeconds("train"), 1.0);  // 5 x 0.1 is below the floor
  monitor.observe(0, report(12, "checkpoint"), clock.at(31.1));
  EXPECT_TRUE(monitor.stalls(clock.at(100)).empty()) << "a second checkpoint gets 150 s";
  EXPECT_EQ(monitor.stalls(clock.at(182)).size(), 1u);
}

TEST(ProgressMonitor, FixedOffAndOutputTimeouts) {
  FakeClock clock;
  HangSettings fixed;
  fixed.mode = HangSettings::Mode::kFixed;
  fixed.fixedSeconds = 3;
  ProgressMonitor a(fixed, {});
  a.startAttempt(2, clock.at(0));
  a.observe(0, report(0), clock.at(0));  // one report is enough for a fixed timeout
  a.observe(1, silent(), clock.at(0));   // a rank that never reports is not judged by progress
  EXPECT_TRUE(a.stalls(clock.at(2.9)).empty());
  auto stalls = a.stalls(clock.at(3.1));
  ASSERT_EQ(stalls.size(), 1u);
  EXPECT_EQ(stalls[0].localRank, 0u);

  HangSettings off;
  off.mode = HangSettings::Mode::kOff;
  ProgressMonitor b(off, {});
  b.startAttempt(1, clock.at(0));
  b.observe(0, report(0), clock.at(0));
  b.observe(0, report(1), clock.at(0.1));
  EXPECT_TRUE(b.stalls(clock.at(1e6)).empty());

  HangSettings output;
  output.mode = HangSettings::Mode::kOff;
  output.outputTimeoutSeconds = 5;
  ProgressMonitor c(output, {});
  c.startAttempt(1, clock.at(0));
  RankObservation printed;
  printed.lastOutput = clock.at(4);
  c.observe(0, printed, clock.at(4));
  EXPECT_TRUE(c.stalls(clock.at(8.9)).empty());
  stalls = c.stalls(clock.at(9.1));
  ASSERT_EQ(stalls.size(), 1u);
  EXPECT_TRUE(stalls[0].byOutput);
}

TEST(ProgressMonitor, TornReadsExitedRanksAndPausesDoNotMisleadIt) {
  FakeClock clock;
  HangSettings hang;
  hang.minTimeoutSeconds = 1;
  ProgressMonitor monitor(hang, {});
  monitor.startAttempt(2, clock.at(0));
  monitor.observe(0, report(98), clock.at(0));
  monitor.observe(0, report(99), clock.at(0.1));
  monitor.observe(0, report(9), clock.at(0.2));  // "9" of "99\n" -> "100\n" caught half-written
  EXPECT_EQ(monitor.progress(0, clock.at(0.2)).step, 99);
  // An exited rank is judged no more.
  monitor.observe(1, report(1), clock.at(0));
  monitor.observe(1, report(2), clock.at(0.1));
  RankObservation exited = report(2);
  exited.running = false;
  monitor.observe(1, exited, clock.at(0.2));
  // ddprun stopped by Ctrl-Z for an hour: nobody's silence.
  monitor.shiftForPause(clock.at(0.3), clock.at(3600.3));
  auto stalls = monitor.stalls(clock.at(3600.5));
  EXPECT_TRUE(stalls.empty());
  EXPECT_EQ(monitor.bestStep(), 99);
  EXPECT_TRUE(monitor.everReported());
}

TEST(ProgressMonitor, AStragglerIsNamedOncePerWindowByItsOwnPace) {
  // Synchronous DDP: both ranks advance one step per 0.1 s, but rank 1 is busy 0.09 s of each step and
  // rank 0 only 0.03 s (it waits for rank 1 in the allreduce).
  FakeClock clock;
  StragglerSettings straggler;
  straggler.windowSeconds = 2;
  ProgressMonitor monitor({}, straggler);
  monitor.startAttempt(2, clock.at(0));
  std::vector<Straggler> found;
  for (int step = 0; step <= 45; ++step) {
    const double t = step * 0.1;
    monitor.observe(0, report(step, "train", step * 0.03), clock.at(t));
    monitor.observe(1, report(step, "train", step * 0.09), clock.at(t));
    for (const auto& s : monitor.stragglers(clock.at(t))) found.push_back(s);
  }
  ASSERT_EQ(found.size(), 2u) << "windows ending at 2 s and 4 s";
  EXPECT_EQ(found[0].localRank, 1u);
  EXPECT_TRUE(found[0].byBusyTime);
  EXPECT_NEAR(found[0].pace, 1 / 0.09, 1e-6);
  EXPECT_NEAR(found[0].othersMedian, 1 / 0.03, 1e-6);
  EXPECT_TRUE(monitor.progress(1, clock.at(4.5)).straggler);
  EXPECT_FALSE(monitor.progress(0, clock.at(4.5)).straggler);
  // Without busy times, equal step rates flag nobody; a rank that really advances slower is flagged.
  ProgressMonitor wall({}, straggler);
  wall.startAttempt(3, clock.at(0));
  std::vector<Straggler> wallFound;
  for (int tick = 0; tick <= 25; ++tick) {
    const double t = tick * 0.1;
    wall.observe(0, report(tick), clock.at(t));
    wall.observe(1, report(tick), clock.at(t));
    wall.observe(2, report(tick / 3), clock.at(t));
    for (const auto& s : wall.stragglers(clock.at(t))) wallFound.push_back(s);
  }
  ASSERT_EQ(wallFound.size(), 1u);
  EXPECT_EQ(wallFound[0].localRank, 2u);
  EXPECT_FALSE(wallFound[0].byBusyTime);
}

TEST(ProgressFile, ParsesCompleteReportsAndIgnoresHalfWrittenOnes) {
  EXPECT_EQ(parseProgress("42\n")->step, 42);
  EXPECT_FALSE(parseProgress(""));
  EXPECT_FALSE(parseProgress("42"));  // no newline yet: maybe "420\n" half-written
  EXPECT_FALSE(parseProgress("4x\n"));
  EXPECT_FALSE(parseProgress("-1\n"));
  auto full = parseProgress("7\n448 checkpoint 1.25\n");
  ASSERT_TRUE(full);
  EXPECT_EQ(full->samples, 448);
  EXPECT_EQ(full->phase, "checkpoint");
  EXPECT_EQ(full->busySeconds, 1.25);
  auto partial = parseProgress("7\n448 chec");  // line 2 not complete: the step alone
  ASSERT_TRUE(partial);
  EXPECT_EQ(partial->phase, "");
  EXPECT_EQ(parseProgress(formatProgress(*full))->busySeconds, 1.25);
}

TEST(StackDump, QuotesTheInnermostFrameOfTheMainThreadOutsideTheCRuntime) {
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
  const std::string unnamed = "TID 9:\n#0  0x1 __nanosleep - /usr/lib/libc.so.6\n#1  0x2 - /usr/bin/python3.11\n"
                              "#2  0x3 _PyEval_EvalFrameDefault - /usr/bin/python3.11\n";
  EXPECT_EQ(innermostNativeFrame(unnamed, 9), "_PyEval_EvalFrameDefault (python3.11)");
  const std::string python =
      "Fatal Python error: Aborted\n\nThread 0x00007f1 (most recent call first):\n  File \"t.py\", line 9 in worker\n\n"
      "Current thread 0x00007f2 (most recent call first):\n  File \"train.py\", line 46 in main\n"
      "  File \"train.py\", line 59 in <module>\n";
  EXPECT_EQ(innermostPythonFrame(python), "File \"train.py\", line 46 in main");
  EXPECT_EQ(innermostPythonFrame("no dump"), "");
}

TEST(StackDump, TellsARankWaitingInACollectiveFromOneStuckInItsOwnCode) {
  // Frames as ddprun quotes them from real hangs: the C++ worker over shm and Gloo, python3-torch DDP.
  EXPECT_TRUE(waitsInCollective("ddprun::worker::CollectiveQueue::wait(unsigned long) (worker)", ""));
  EXPECT_TRUE(waitsInCollective("ddprun::worker::ShmGroup::waitFor(int, unsigned int) (worker)", ""));
  EXPECT_TRUE(waitsInCollective("c10d::Reducer::finalize_backward() (libtorch_cpu.so.1.13.0)",
                                "File \"train.py\", line 30 in main"));
  EXPECT_TRUE(waitsInCollective("gloo::transport::tcp::UnboundBuffer::waitRecv(int*, std::chrono::duration<long, std::ratio<1l, 1000l> >) (libgloo.so)", ""));
  EXPECT_TRUE(waitsInCollective("", "File \"/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py\", line 1536 in all_reduce"));
  EXPECT_FALSE(waitsInCollective("ddprun::worker::FaultInjector::beforeStep(long) const (worker)", ""));
  EXPECT_FALSE(waitsInCollective("_PyEval_EvalFrameDefault (python3.11)", "File \"train.py\", line 28 in main"));
  EXPECT_FALSE(waitsInCollective("", ""));
}

}  // namespace
}  // namespace ddprun::launcher
