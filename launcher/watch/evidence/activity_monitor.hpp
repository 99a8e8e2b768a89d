#pragma once
// When each rank last worked, from samples of its process tree (process_activity.hpp), and when its communication
// last moved. Pure: the watch feeds it samples with the time they were taken; tests and the trace replay feed it
// recorded ones on a fake clock.
//
// A rank works in an interval between two samples when its processes used at least kBusyCpuShare of one core,
// moved at least kBusyIoBytesPerSecond through read/write calls or their TCP sockets, or touched storage, when
// sampled one of them was running or waiting for a CPU (state R) or its main thread sat in uninterruptible I/O
// (state D), or when it was starved: processes that compute (their main threads run in long slices) waited at least
// kBusyCpuShare of a core for a CPU (schedstat's run delay). An idle Python rank shows about 1-2 % of a core (its
// background threads) and sleeps; a DataLoader worker, an evaluation or a checkpoint shows tens of percent or more,
// and on a machine loaded by other work, where it gets little CPU, it waits for one.
//
// Its communication moves in an interval when it moved those bytes or touched storage, or when the threads of its
// own process other than the main one used kBusyCpuShare of a core: in a long Gloo allreduce the main thread waits
// while Gloo's threads send and reduce, and in a deadlock they sleep with it. The main thread's own CPU is kept
// apart: a collective's wait may spin on it (NCCL).
//
// What is not seen is not idle: every "seconds since" is measured to the rank's latest sample, never to the present,
// and from its first sample after its last progress (its baseline), or from that progress where the baseline came
// within kTrustedGap of it (the watch samples a rank only once it has been quiet a moment); so a rank the watch could
// not read for a while (a loaded machine, a slow read) is not idle for that while.
#include <chrono>
#include <cstddef>
#include <deque>
#include <optional>
#include <vector>

#include "launcher/watch/evidence/process_activity.hpp"

namespace ddprun::launcher {

/// At least this share of one core counts as work.
inline constexpr double kBusyCpuShare = 0.05;
/// At least this many bytes a second through read and write calls count as work.
inline constexpr double kBusyIoBytesPerSecond = 64 * 1024;

class ActivityMonitor {
 public:
  using Time = std::chrono::steady_clock::time_point;

  /// A new attempt of `ranks` ranks started at `now`: what is known is forgotten; nobody has worked yet.
  void startAttempt(size_t ranks, Time now);
  /// A sample of `rank`'s tree taken at `at`. The first sample after a forget() is a baseline only.
  void observe(size_t rank, const ActivityCounters& counters, Time at);
  /// The rank made progress (a step or a phase) at `now`: that is work too, and its next quiet period is measured
  /// from a new baseline.
  void progressed(size_t rank, Time now);
  /// Drops `rank`'s samples: another process now (a replacement), whose counters start over.
  void forget(size_t rank);
  /// ddprun was stopped (Ctrl-Z) or held the ranks (a stack tool's ptrace) from `pausedAt` to `now`: the workers
  /// were too.
  void shiftForPause(Time pausedAt, Time now);

  /// Seconds `rank` was seen idle: from when it last worked (or its baseline) to its latest sample.
  double idleSeconds(size_t rank) const;
  /// Seconds since its communication last moved (bytes, storage, threads other than the main one), as seen.
  double quietSeconds(size_t rank) const;
  /// Seconds since its main thread last used kBusyCpuShare of a core, as seen.
  double mainIdleSeconds(size_t rank) const;
  /// Seconds since it last moved bytes or touched storage (its work since then, if any, was CPU alone), as seen.
  double ioIdleSeconds(size_t rank) const;
  /// Whether its main thread woke up (ran briefly, then slept again) in at least kPollWakes intervals since its
  /// baseline, the last of them within `withinSeconds` of its latest sample: a wait loop (sleep-polling for a file,
  /// a queue read with a timeout), not one blocked call.
  bool polls(size_t rank, double withinSeconds) const;
  /// Its share of one core over the last interval sampled; nullopt before two samples.
  std::optional<double> cpuShare(size_t rank) const;
  /// Its share of one core over the last interval in which it worked by CPU; nullopt when none since the baseline.
  std::optional<double> workedShare(size_t rank) const;
  /// Whether it was starved (waited for a CPU while computing) in the last interval sampled.
  bool starved(size_t rank) const;
  /// Whether its main thread waited for console input when last sampled.
  bool waitsForInput(size_t rank) const;
  /// Whether its main thread was stopped when last sampled (state T: SIGSTOP; t: a debugger's stop).
  bool stopped(size_t rank) const;
  /// When it was last sampled (Time{} when never since the last progress or forget()).
  Time lastSample(size_t rank) const;

  /// Main thread wake-ups that make a wait loop.
  static constexpr size_t kPollWakes = 2;
  /// A baseline taken this soon after the rank's last progress sees it idle from that progress.
  static constexpr std::chrono::milliseconds kTrustedGap{1000};

 private:
  struct Rank {
    std::optional<ActivityCounters> last;
    Time lastAt{};
    Time baseline{};  ///< its first sample since its last progress (or that progress): what came before was not seen
    Time progressedAt{};
    /// The next sample only starts a new interval (after a pause or a look): `last` still tells the main thread's
    /// state, but no counter may be compared across the pause.
    bool newBaseline = false;
    Time worked{};           ///< any work: CPU of the tree, bytes, storage, a runnable process, I/O, starved computing
    Time moved{};            ///< its communication: bytes, storage, or threads other than the main one using CPU
    Time mainWorked{};       ///< its main thread used CPU
    Time ioMoved{};          ///< bytes or storage
    std::deque<Time> wakes;  ///< samples in which the main thread woke without computing (the last kPollWakes)
    std::optional<double> cpuShare;
    std::optional<double> workedShare;
    bool starved = false;
  };
  /// Seconds from `since` (not before the baseline) to the latest sample.
  double seen(const Rank& rank, Time since) const;
  std::vector<Rank> ranks_;
};

}  // namespace ddprun::launcher
