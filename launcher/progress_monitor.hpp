#pragma once
// What the agent knows about its ranks' progress, from their progress files (common/progress_file.hpp) and
// their output, and the two verdicts drawn from it: a hang (no progress for longer than the hang timeout)
// and a straggler (a rank whose own pace is well below the others'). Pure: the agent feeds it one
// observation per rank per tick with the time; tests feed it with a fake clock.
//
// Hang timeout: `auto` arms only for ranks that have reported at least twice (a script that never reports
// is never flagged) and waits safetyFactor x the longest interval any rank of the job took in the phase the
// rank is in now (so a checkpoint or an evaluation, longer than a step, is judged by its own history), never
// less than the floor; a phase never seen to finish yet is not judged. A fixed timeout applies to every rank
// that reported once. The factor follows NVIDIA ft_launcher's automatic timeouts (fault_tolerance/
// timeouts_calc.py: the longest interval observed, times 5).
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/progress_file.hpp"

namespace ddprun::launcher {

using SteadyTime = std::chrono::steady_clock::time_point;

/// --hang-timeout and friends.
struct HangSettings {
  enum class Mode { kAuto, kFixed, kOff };
  Mode mode = Mode::kAuto;
  double fixedSeconds = 0;         ///< kFixed
  double minTimeoutSeconds = 5;    ///< --hang-min-timeout: auto's floor
  double safetyFactor = 5;         ///< auto: this many times the longest interval seen
  std::optional<double> outputTimeoutSeconds;  ///< --output-timeout: silence on stdout/stderr that long
};

/// --straggler-factor and --straggler-window.
struct StragglerSettings {
  double factor = 1.5;           ///< flagged when the others' median pace exceeds this rank's by this factor
  double windowSeconds = 10;     ///< paces are compared over windows of this length
};

/// One rank as the agent saw it at one tick.
struct RankObservation {
  std::optional<ProgressRecord> progress;  ///< none: no (complete) report in the file
  SteadyTime lastOutput{};                 ///< time_point{}: no output yet
  bool running = true;                     ///< exited ranks are judged no more
};

/// A rank the hang verdict flags.
struct Stall {
  size_t localRank = 0;
  std::optional<int64_t> step;  ///< the last step it reported (none for an output-silence stall)
  std::string phase;            ///< the phase it reported with it
  double silentSeconds = 0;     ///< since its step last changed (or its last output)
  double timeoutSeconds = 0;    ///< the timeout it passed
  bool byOutput = false;        ///< --output-timeout, not progress
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
  std::vector<double> rateHistory;          ///< one sample per window, oldest first
  std::optional<double> progressAgeSeconds;
  std::optional<double> outputAgeSeconds;
  bool hung = false;
  bool straggler = false;
};

class ProgressMonitor {
 public:
  ProgressMonitor(HangSettings hang, StragglerSettings straggler);

  /// A new attempt with `ranks` local ranks: per-rank state is forgotten, the job-wide phase durations kept.
  void startAttempt(size_t ranks, SteadyTime now);
  /// One tick's observation of `rank`.
  void observe(size_t rank, const RankObservation& observation, SteadyTime now);
  /// ddprun was stopped (Ctrl-Z) from `pausedAt` until `now`: that time is nobody's silence.
  void shiftForPause(SteadyTime pausedAt, SteadyTime now);

  /// Ranks that passed their timeout now. Each is flagged once per attempt.
  std::vector<Stall> stalls(SteadyTime now);
  /// Ranks found to be stragglers by a window that ended now; each window reports a rank at most once.
  std::vector<Straggler> stragglers(SteadyTime now);
  /// Adds a point to each rank's step-rate history (at most one a second; the status page's sparkline).
  void sampleRates(SteadyTime now);

  /// The auto timeout for `phase` now (nullopt when that phase was never seen to finish).
  std::optional<double> autoTimeoutSeconds(const std::string& phase) const;
  RankProgress progress(size_t rank, SteadyTime now) const;
  /// The highest step any rank reported in this attempt.
  std::optional<int64_t> bestStep() const;
  /// Whether any rank of this job ever reported progress.
  bool everReported() const { return everReported_; }
  size_t ranks() const { return ranks_.size(); }

 private:
  struct Sample {
    SteadyTime time;
    int64_t step;
    std::optional<double> busy;
  };
  struct Rank {
    std::optional<ProgressRecord> last;
    int reports = 0;           ///< distinct steps seen
    SteadyTime changed{};      ///< when the step last changed
    SteadyTime lastOutput{};
    bool running = true;
    bool flagged = false;      ///< a stall was reported this attempt
    bool straggler = false;
    std::deque<Sample> samples;     ///< for paces over the current and previous window
    std::vector<double> rateHistory;
  };

  std::optional<double> timeoutFor(const Rank& rank) const;
  /// Steps per busy second (when reported) or per second over [from, to]; `byBusy` says which.
  std::optional<double> paceOver(const Rank& rank, SteadyTime from, SteadyTime to, bool& byBusy) const;
  /// Steps per second over [from, now], 0 when the rank did not move.
  static double rateOver(const Rank& rank, SteadyTime from, SteadyTime now);
  static double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

  HangSettings hang_;
  StragglerSettings straggler_;
  std::vector<Rank> ranks_;
  std::map<std::string, double> longestInterval_;  ///< by phase, over the whole job
  SteadyTime attemptStart_{};
  SteadyTime windowStart_{};
  SteadyTime lastRateSample_{};
  bool everReported_ = false;
};

}  // namespace ddprun::launcher
