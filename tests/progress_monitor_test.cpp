// The hang suspicion and straggler verdicts on a fake clock (no processes, no sleeps), and the progress-file
// parser.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/progress_file.hpp"
#include "launcher/watch/progress_monitor.hpp"

namespace ddprun::launcher {
namespace {
using namespace std::chrono_literals;

/// A fake clock: a start instant plus seconds.
struct FakeClock {
  SteadyTime start = SteadyTime{} + 1000s;
  SteadyTime at(double seconds) const {
    return start +
           std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
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

/// The local ranks of a suspicion at `now` (empty: none).
std::vector<size_t> suspects(const ProgressMonitor& monitor, SteadyTime now) {
  const auto s = monitor.suspicion(now);
  return s ? s->ranks : std::vector<size_t>{};
}

TEST(ProgressMonitor, AutoArmsAtTheFirstReportAndWaitsFiveTimesTheLongestInterval) {
  FakeClock clock;
  HangSettings hang;
  hang.minTimeoutSeconds = 1;
  ProgressMonitor monitor(hang, {});
  monitor.startAttempt(1, clock.at(0));
  EXPECT_TRUE(suspects(monitor, clock.at(1000)).empty()) << "a job that never reported is never judged";
  monitor.observe(0, report(0), clock.at(0));
  EXPECT_TRUE(suspects(monitor, clock.at(0.9)).empty());
  auto first = monitor.suspicion(clock.at(1.1));
  ASSERT_TRUE(first) << "one report arms it, at the floor: a hang at step 2 is caught";
  EXPECT_EQ(first->source, TimeoutSource::kFloor);
  EXPECT_EQ(first->learntSeconds, 0.0);
  // The first interval of an attempt (the first step, a warm-up) is not learnt; the next ones are.
  monitor.observe(0, report(1), clock.at(10));
  EXPECT_FALSE(monitor.autoTimeoutSeconds("train") > 1.0) << "a 10 s warm-up does not inflate the timeout";
  monitor.observe(0, report(2), clock.at(10.4));  // 0.4 s: timeout max(1, 5 x 0.4) = 2 s
  EXPECT_EQ(monitor.autoTimeoutSeconds("train"), 2.0);
  EXPECT_TRUE(suspects(monitor, clock.at(12.3)).empty());
  const auto s = monitor.suspicion(clock.at(12.5));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->ranks, std::vector<size_t>{0});
  EXPECT_EQ(s->lastStep, 2);
  EXPECT_NEAR(s->stalledSeconds, 2.1, 1e-9);
  EXPECT_EQ(s->timeoutSeconds, 2.0);
  EXPECT_EQ(s->source, TimeoutSource::kLearnt);
  EXPECT_NEAR(s->learntSeconds, 0.4, 1e-9);
  EXPECT_TRUE(s->stepsOnly);
  EXPECT_TRUE(monitor.suspicion(clock.at(13))) << "asking flags nobody: the suspicion stands until progress";
  monitor.startAttempt(1, clock.at(20));
  EXPECT_EQ(monitor.autoTimeoutSeconds("train"), 2.0) << "what the job learnt outlives the attempt";
}

TEST(ProgressMonitor, AFinishedRanksStepsAndSamplesPerSecondAgree) {
  // 64 samples a step at 10 steps a second for 10 s, then the rank exits; the report is written 30 s later. Both rates
  // are of the same window up to its last report (steps/s read 5.60 beside 596 samples/s before).
  FakeClock clock;
  ProgressMonitor monitor({}, {});
  monitor.startAttempt(1, clock.at(0));
  for (int step = 0; step <= 100; ++step) {
    RankObservation seen = report(step);
    seen.progress->samples = 64 * step;
    monitor.observe(0, seen, clock.at(step * 0.1));
  }
  const auto running = monitor.progress(0, clock.at(10.05));
  EXPECT_NEAR(running.stepsPerSecond, 10, 0.6);
  RankObservation gone = report(100);
  gone.progress->samples = 6400;
  gone.running = false;
  monitor.observe(0, gone, clock.at(12));
  const auto finished = monitor.progress(0, clock.at(40));
  EXPECT_NEAR(finished.stepsPerSecond, 10, 0.6);
  ASSERT_TRUE(finished.samplesPerSecond);
  EXPECT_NEAR(*finished.samplesPerSecond / finished.stepsPerSecond, 64, 3);
}

TEST(ProgressMonitor, ANewAttemptOfAJobThatReportedIsJudgedFromItsStart) {
  FakeClock clock;
  HangSettings hang;
  hang.minTimeoutSeconds = 1;
  ProgressMonitor monitor(hang, {});
  monitor.startAttempt(2, clock.at(0));
  monitor.observe(0, report(0), clock.at(3));  // start-up: 3 s
  monitor.observe(1, report(0), clock.at(4));  // 4 s: the longest
  monitor.startAttempt(2, clock.at(100));
  EXPECT_TRUE(suspects(monitor, clock.at(119.9)).empty()) << "5 x the longest start-up, 20 s";
  const auto s = monitor.suspicion(clock.at(120.1));
  ASSERT_TRUE(s) << "a rank that hangs before its first report is caught";
  EXPECT_EQ(s->ranks, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(s->source, TimeoutSource::kStartup);
  EXPECT_EQ(s->timeoutSeconds, 20.0);
}

TEST(ProgressMonitor, ALongerPhaseIsJudgedByItsOwnHistoryAndRulesTheWholeJob) {
  FakeClock clock;
  HangSettings hang;
  hang.minTimeoutSeconds = 1;
  ProgressMonitor monitor(hang, {});
  monitor.startAttempt(2, clock.at(0));
  for (int step = 0; step <= 10; ++step) {
    monitor.observe(0, report(step), clock.at(step * 0.1));
    monitor.observe(1, report(step), clock.at(step * 0.1));
  }
  // Rank 0 evaluates (announced, never seen to finish) while rank 1 waits in a barrier at the same step: one
  // phase per job, so neither is judged, however long it takes.
  monitor.observe(0, report(10, "eval"), clock.at(1.0));
  EXPECT_FALSE(monitor.suspicion(clock.at(30)));
  EXPECT_FALSE(monitor.currentTimeoutSeconds(clock.at(30)));
  monitor.observe(0, report(10, "train"), clock.at(31));  // the evaluation took 30 s
  EXPECT_EQ(monitor.autoTimeoutSeconds("eval"), 150.0);
  EXPECT_EQ(monitor.autoTimeoutSeconds("train"), 1.0);  // 5 x 0.1 is below the floor
  monitor.observe(0, report(11), clock.at(31.1));
  monitor.observe(1, report(11), clock.at(31.1));
  monitor.observe(0, report(11, "eval"), clock.at(31.2));
  EXPECT_FALSE(monitor.suspicion(clock.at(100))) << "a second evaluation gets 150 s, and so does rank 1";
  const auto s = monitor.suspicion(clock.at(182));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->phase, "eval");
  EXPECT_EQ(s->ranks, (std::vector<size_t>{0, 1}));
  EXPECT_FALSE(s->stepsOnly);
}

TEST(ProgressMonitor, FixedOffAndOutputTimeouts) {
  FakeClock clock;
  HangSettings fixed;
  fixed.mode = HangSettings::Mode::kFixed;
  fixed.fixedSeconds = 3;
  ProgressMonitor a(fixed, {});
  a.startAttempt(2, clock.at(0));
  a.observe(0, report(0), clock.at(0));  // one report is enough for a fixed timeout
  a.observe(1, silent(), clock.at(0));   // a rank that never reports is never judged
  EXPECT_TRUE(suspects(a, clock.at(2.9)).empty());
  auto s = a.suspicion(clock.at(3.1));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->ranks, std::vector<size_t>{0});
  EXPECT_EQ(s->source, TimeoutSource::kFlag);

  HangSettings off;
  off.mode = HangSettings::Mode::kOff;
  ProgressMonitor b(off, {});
  b.startAttempt(1, clock.at(0));
  b.observe(0, report(0), clock.at(0));
  b.observe(0, report(1), clock.at(0.1));
  EXPECT_FALSE(b.suspicion(clock.at(1e6)));

  HangSettings output;
  output.mode = HangSettings::Mode::kOff;
  output.outputTimeoutSeconds = 5;
  ProgressMonitor c(output, {});
  c.startAttempt(1, clock.at(0));
  RankObservation printed;
  printed.lastOutput = clock.at(4);
  c.observe(0, printed, clock.at(4));
  EXPECT_FALSE(c.suspicion(clock.at(8.9)));
  s = c.suspicion(clock.at(9.1));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->source, TimeoutSource::kOutput);
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
  EXPECT_EQ(monitor.progress(0, clock.at(0.2)).stepsTotal, 1u);
  // An exited rank is judged no more.
  monitor.observe(1, report(1), clock.at(0));
  monitor.observe(1, report(2), clock.at(0.1));
  RankObservation exited = report(2);
  exited.running = false;
  monitor.observe(1, exited, clock.at(0.2));
  // ddprun stopped by Ctrl-Z for an hour: nobody's silence.
  monitor.shiftForPause(clock.at(0.3), clock.at(3600.3));
  EXPECT_FALSE(monitor.suspicion(clock.at(3600.5)));
  EXPECT_EQ(monitor.bestStep(), 99);
  EXPECT_TRUE(monitor.everReported());
}

TEST(ProgressMonitor, CountsStepsOverAttemptsAndKeepsScalars) {
  FakeClock clock;
  ProgressMonitor monitor({}, {});
  monitor.startAttempt(1, clock.at(0));
  for (int step = 0; step <= 10; ++step) monitor.observe(0, report(step), clock.at(step * 0.1));
  monitor.startAttempt(1, clock.at(2));  // resumed from a checkpoint at step 8
  RankObservation seen = report(8);
  seen.progress->scalars = {{"loss", 0.31}};
  monitor.observe(0, seen, clock.at(2));
  monitor.observe(0, report(12), clock.at(2.4));
  const auto progress = monitor.progress(0, clock.at(2.5));
  EXPECT_EQ(progress.stepsTotal, 14u) << "10 steps, then 4: a counter that rate() can use across attempts";
  EXPECT_TRUE(progress.scalars.empty()) << "the last report had none";
  seen = report(12);
  seen.progress->scalars = {{"loss", 0.25}};
  monitor.observe(0, seen, clock.at(2.6));
  ASSERT_EQ(monitor.progress(0, clock.at(2.6)).scalars.size(), 1u);
  EXPECT_EQ(monitor.progress(0, clock.at(2.6)).scalars[0].second, 0.25);
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

TEST(ProgressFile, CarriesScalarsOnLaterLines) {
  auto record = parseProgress("7\n448 train\nloss=0.31\nlr=1e-3\nnot a scalar\n=1\n1x=2\nacc=nan\ncut=0.");
  ASSERT_TRUE(record);
  ASSERT_EQ(record->scalars.size(), 2u) << "only complete, well-formed, finite lines";
  EXPECT_EQ(record->scalars[0], std::make_pair(std::string("loss"), 0.31));
  EXPECT_EQ(record->scalars[1], std::make_pair(std::string("lr"), 1e-3));
  EXPECT_EQ(record->phase, "train");
  auto bare = parseProgress("3\nloss=2.5\n");  // no samples line: a scalar on line 2
  ASSERT_TRUE(bare);
  ASSERT_EQ(bare->scalars.size(), 1u);
  EXPECT_EQ(bare->phase, "");
  EXPECT_EQ(parseProgress(formatProgress(*record))->scalars, record->scalars);
  std::string many = "1\n";
  for (int i = 0; i < 20; ++i) many += "s" + std::to_string(i) + "=" + std::to_string(i) + "\n";
  EXPECT_EQ(parseProgress(many)->scalars.size(), kMaxProgressScalars);
}

TEST(ProgressFile, AReaderNeverBlocksOnAFifoOrFollowsALink) {
  const std::string dir = ::testing::TempDir() + "progress-fifo-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  ASSERT_EQ(::mkfifo((dir + "/fifo").c_str(), 0600), 0);
  EXPECT_FALSE(readProgressFile(dir + "/fifo")) << "returned at once, nothing read";
  std::ofstream(dir + "/real") << "5\n";
  std::filesystem::create_symlink(dir + "/real", dir + "/link");
  EXPECT_EQ(readProgressFile(dir + "/real")->step, 5);
  EXPECT_FALSE(readProgressFile(dir + "/link"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ddprun::launcher
