#pragma once
// When each rank last worked, from samples of its process tree (process_activity.hpp), and when its communication
// last moved. Pure: the watch feeds it samples with the time; tests feed it recorded ones on a fake clock.
//
// A rank works in an interval between two samples when its processes used at least kBusyCpuShare of one core,
// moved at least kBusyIoBytesPerSecond through read/write calls or their TCP sockets, or touched storage, or when
// sampled one of them was running or waiting for a CPU (state R: on an oversubscribed machine a computing rank may
// get little CPU, but it wants it) or its main thread sat in uninterruptible I/O (state D). An idle Python rank
// shows about 1-2 % of a core (its background threads) and sleeps (state S); a DataLoader worker, an evaluation or a
// checkpoint shows tens of percent or more.
//
// Its communication moves in an interval when it moved those bytes or touched storage, or when the threads of its
// own process other than the main one used kBusyCpuShare of a core: in a long Gloo allreduce the main thread waits
// while Gloo's threads send and reduce (1-1.5 GB/s per rank on loopback, tens of percent of a core), and in a
// deadlock they sleep with it. The main thread's own CPU is kept apart: a collective's wait may spin on it (NCCL).
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
  /// Seconds since its communication last moved (bytes, storage, threads other than the main one).
  double quietSeconds(size_t rank, Time now) const;
  /// Seconds since its main thread last used kBusyCpuShare of a core.
  double mainIdleSeconds(size_t rank, Time now) const;
  /// Seconds since it last moved bytes or touched storage (its work since then, if any, was CPU alone).
  double ioIdleSeconds(size_t rank, Time now) const;
  /// Its share of one core over the last interval sampled; nullopt before two samples.
  std::optional<double> cpuShare(size_t rank) const;
  /// Its share of one core over the last interval in which it worked by CPU; nullopt when none since the baseline.
  std::optional<double> workedShare(size_t rank) const;
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
    /// The next sample only starts a new interval (after a pause or a look): `last` still tells the main thread's
    /// state, but no counter may be compared across the pause.
    bool newBaseline = false;
    Time worked{};      ///< any work: CPU of the tree, bytes, storage, a runnable process, uninterruptible I/O
    Time moved{};       ///< its communication: bytes, storage, or threads other than the main one using CPU
    Time mainWorked{};  ///< its main thread used CPU
    Time ioMoved{};     ///< bytes or storage
    std::optional<double> cpuShare;
    std::optional<double> workedShare;
  };
  std::vector<Rank> ranks_;
};

}  // namespace ddprun::launcher
