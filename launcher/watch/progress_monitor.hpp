#pragma once
// What the agent knows about its ranks' progress, from their progress files (common/progress_file.hpp) and
// their output, and two verdicts drawn from it: the hang suspicion (ranks past their timeout; hang_rule.hpp then
// looks at what they do) and stragglers (a rank whose own pace is well below the others'). Pure: the agent feeds
// it one observation per rank per tick with the time; tests feed it with a fake clock.
//
// Progress is a change of step or of phase. Hang timeout `auto`: safetyFactor x the longest interval between
// two changes that any rank of the job took in the phase (never less than the floor, --hang-min-timeout),
// after NVIDIA ft_launcher's automatic timeouts (fault_tolerance/timeouts_calc.py: the longest interval seen,
// times 5). It arms at a rank's first report of an attempt, with the floor while the phase has no history; the
// first interval of each attempt (the first step, a warm-up) is not learnt. A rank that reported in an earlier
// attempt is judged from the new attempt's start, before its first report, by the longest start-up seen. One phase per
// job: while any rank announces a phase other than "train", every rank is judged by that phase (a rank waiting
// in a barrier for rank 0's evaluation is judged by the evaluation), and a phase never seen to finish is not
// judged. A fixed timeout applies to every rank that reported.
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/progress_file.hpp"
#include "launcher/watch/watch_settings.hpp"

namespace ddprun::launcher {

using SteadyTime = std::chrono::steady_clock::time_point;

/// One rank as the agent saw it at one tick.
struct RankObservation {
  std::optional<ProgressRecord> progress;  ///< none: no (complete) report in the file
  SteadyTime lastOutput{};                 ///< time_point{}: no output yet
  bool running = true;                     ///< exited ranks are judged no more
};

/// Where the hang timeout in effect comes from.
enum class TimeoutSource {
  kFloor,       ///< auto, at its floor (--hang-min-timeout)
  kLearnt,      ///< auto, safetyFactor x the longest interval of the phase
  kStartup,     ///< auto, before a rank's first report: safetyFactor x the longest start-up seen
  kFlag,        ///< --hang-timeout SECONDS
  kOutput,      ///< --output-timeout
  kUnreported,  ///< no rank has reported in this attempt: a rank idle for twice the floor (or --hang-timeout)
};

/// Ranks past their timeout: what the hang rule starts from.
struct Suspicion {
  std::vector<size_t> ranks;  ///< local ranks past their timeout
  double stalledSeconds = 0;  ///< since any running rank last made progress (or the attempt started)
  double timeoutSeconds = 0;  ///< the timeout they passed (the largest)
  TimeoutSource source = TimeoutSource::kFloor;
  double learntSeconds = 0;  ///< the longest interval seen in `phase` (start-up for kStartup); 0: none
  double safetyFactor = 5;
  std::string phase = "train";      ///< the job's phase
  std::optional<int64_t> lastStep;  ///< the highest step reported in the attempt
  bool stepsOnly = true;            ///< no rank of the job ever announced a phase (the hint applies)
};

/// A rank the straggler verdict flags, and why.
struct Straggler {
  size_t localRank = 0;
  double pace = 0;          ///< its steps per second (of its own busy time, when it reports that)
  double othersMedian = 0;  ///< the other ranks' median pace
  bool byBusyTime = false;  ///< paces per busy second rather than per wall second
};

/// What the status page shows of one rank.
struct RankProgress {
  std::optional<int64_t> step;
  std::string phase;
  double stepsPerSecond = 0;
  std::optional<double> samplesPerSecond;  ///< when the rank reports its samples
  std::vector<double> rateHistory;         ///< one sample per window, oldest first
  std::optional<double> progressAgeSeconds;
  std::optional<double> outputAgeSeconds;
  uint64_t stepsTotal = 0;                              ///< steps advanced in every attempt of this run (a counter)
  std::vector<std::pair<std::string, double>> scalars;  ///< the last report's scalars (e.g. loss)
  bool hung = false;
  bool straggler = false;
  std::string suspected;  ///< what the watch reports of it without acting ("spins in one place? (…)"); "" when nothing
};

class ProgressMonitor {
 public:
  ProgressMonitor(HangSettings hang, StragglerSettings straggler);

  /// A new attempt with `ranks` local ranks: per-rank state is forgotten, what the job learnt is kept.
  void startAttempt(size_t ranks, SteadyTime now);
  /// One tick's observation of `rank`. Returns true when the rank made progress (a new step or phase).
  bool observe(size_t rank, const RankObservation& observation, SteadyTime now);
  /// ddprun was stopped (Ctrl-Z) from `pausedAt` until `now`: that time is nobody's silence.
  void shiftForPause(SteadyTime pausedAt, SteadyTime now);

  /// Ranks past their timeout now (none: nullopt). Asking does not flag anybody.
  std::optional<Suspicion> suspicion(SteadyTime now) const;
  /// Marks ranks hung (the status page's mark), for the rest of the attempt (or until regroup()).
  void markHung(const std::vector<size_t>& ranks);
  /// The group regrouped at `now` within the attempt (a rank replaced in place, --restart-scope rank): the others
  /// waited for it, so every rank's silence counts from now, the interval across the regrouping is learnt by
  /// nobody, and the hung marks go. What each rank reported stays (the new rank goes on from it).
  void regroup(SteadyTime now);
  /// The timeout that applies to the job now (the largest of the running ranks'); nullopt when none is armed.
  std::optional<double> currentTimeoutSeconds(SteadyTime now) const;
  /// Seconds since `rank` last made progress (or since the attempt started).
  double silentSeconds(size_t rank, SteadyTime now) const;

  /// Ranks found to be stragglers by a window that ended now; each window reports a rank at most once.
  std::vector<Straggler> stragglers(SteadyTime now);
  /// Adds a point to each rank's step-rate history (at most one a second; the status page's sparkline).
  void sampleRates(SteadyTime now);

  /// The auto timeout for `phase` now (nullopt when that phase was never seen to finish).
  std::optional<double> autoTimeoutSeconds(const std::string& phase) const;
  RankProgress progress(size_t rank, SteadyTime now) const;
  /// The highest step any rank reported in this attempt.
  std::optional<int64_t> bestStep() const;
  /// The lowest step a rank reported first in this attempt (a resumed attempt starts at its checkpoint).
  std::optional<int64_t> startStep() const;
  /// The step of `rank`'s last report in this attempt.
  std::optional<int64_t> step(size_t rank) const;
  /// Whether any rank of this job ever reported progress.
  bool everReported() const { return everReported_; }
  /// Whether any rank reported progress in this attempt.
  bool attemptReported() const;
  /// The longest interval between two changes seen in `phase` (seconds); 0 when none.
  double longestInterval(const std::string& phase) const;
  size_t ranks() const { return ranks_.size(); }

 private:
  struct Sample {
    SteadyTime time;
    int64_t step;
    std::optional<double> busy;
    std::optional<int64_t> samples;
  };
  struct Rank {
    std::optional<ProgressRecord> last;
    std::optional<int64_t> first;  ///< the step of its first report in the attempt
    bool learns = false;           ///< its intervals are learnt (not before its second change in the attempt)
    SteadyTime changed{};          ///< when its step or phase last changed (the attempt's start before a report)
    SteadyTime lastOutput{};
    bool running = true;
    bool hung = false;  ///< marked by a hang verdict this attempt
    bool straggler = false;
    std::deque<Sample> samples;  ///< for paces over the current and previous window
    std::vector<double> rateHistory;
  };
  struct Timeout {
    double seconds = 0;
    TimeoutSource source = TimeoutSource::kFloor;
    double learnt = 0;
  };

  /// The phase every rank is judged by now: an announced one when any running rank is in one.
  std::string jobPhase() const;
  std::optional<Timeout> timeoutFor(size_t rank, const std::string& phase) const;
  std::optional<Timeout> autoTimeout(const std::string& phase) const;
  /// Steps per busy second (when reported) or per second over [from, to]; `byBusy` says which.
  std::optional<double> paceOver(const Rank& rank, SteadyTime from, SteadyTime to, bool& byBusy) const;
  /// Steps the rank advanced over [from, to], from its samples.
  static int64_t stepsOver(const Rank& rank, SteadyTime from, SteadyTime to);
  /// Steps per second over [from, now], 0 when the rank did not move.
  static double rateOver(const Rank& rank, SteadyTime from, SteadyTime now);
  static double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

  HangSettings hang_;
  StragglerSettings straggler_;
  std::vector<Rank> ranks_;
  std::vector<uint64_t> stepsTotal_;               ///< by local rank, over every attempt
  std::vector<bool> reportedBefore_;               ///< by local rank: reported in an earlier attempt
  std::map<std::string, double> longestInterval_;  ///< by phase, over the whole job
  std::optional<double> longestStartup_;           ///< attempt start to first report, over the whole job
  SteadyTime attemptStart_{};
  SteadyTime windowStart_{};
  SteadyTime lastRateSample_{};
  bool everReported_ = false;
  bool announcedPhase_ = false;  ///< any rank ever reported a phase other than "train"
};

/// The phase a report stands for: its own, "train" when it names none.
std::string phaseOf(const ProgressRecord& record);

}  // namespace ddprun::launcher
