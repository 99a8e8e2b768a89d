#pragma once
// When each rank last worked, from samples of its process tree (process_activity.hpp). Pure: the watch feeds it
// samples with the time; tests feed it recorded ones on a fake clock.
//
// A rank works in an interval between two samples when its processes used at least kBusyCpuShare of one core,
// moved at least kBusyIoBytesPerSecond through read/write calls or touched storage, or when sampled one of them was
// running or waiting for a CPU (state R: on an oversubscribed machine a computing rank may get little CPU, but it
// wants it) or its main thread sat in uninterruptible I/O (state D). An idle Python rank shows about 1-2 % of a core
// (its background threads) and sleeps (state S); a DataLoader worker, an evaluation or a checkpoint shows tens of
// percent or more.
#include <chrono>
#include <cstddef>
#include <optional>
#include <vector>

#include "launcher/watch/process_activity.hpp"

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
  /// A sample of `rank`'s tree taken at `now`. The first sample after a forget() is a baseline only.
  void observe(size_t rank, const ActivityCounters& counters, Time now);
  /// The rank made progress (a step or a phase) at `now`: that is work too.
  void progressed(size_t rank, Time now);
  /// Drops `rank`'s last sample (when it stepped, its next quiet period starts from a new baseline).
  void forget(size_t rank);
  /// ddprun was stopped (Ctrl-Z) from `pausedAt` to `now`: the workers were too.
  void shiftForPause(Time pausedAt, Time now);

  /// Seconds since `rank` last worked (or since the attempt started).
  double idleSeconds(size_t rank, Time now) const;
  /// Its share of one core over the last interval sampled; nullopt before two samples.
  std::optional<double> cpuShare(size_t rank) const;
  /// Whether its main thread waited for console input when last sampled.
  bool waitsForInput(size_t rank) const;
  /// Whether its main thread was stopped when last sampled (state T: SIGSTOP; t: a debugger's stop).
  bool stopped(size_t rank) const;
  /// When it was last sampled (Time{} when never since the last forget()).
  Time lastSample(size_t rank) const;

 private:
  struct Rank {
    std::optional<ActivityCounters> last;
    Time lastAt{};
    Time worked{};
    std::optional<double> cpuShare;
  };
  std::vector<Rank> ranks_;
};

}  // namespace ddprun::launcher
