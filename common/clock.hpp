#pragma once
// Time as a dependency: the monotonic clock, the wall clock and sleeping behind one small interface, so
// that policies with timeouts (the rendezvous, retries) run in tests against a fake clock with no sleeps.
// A Deadline is computed once at the top of an operation and handed to every step of it, as torch's
// dynamic rendezvous does (dynamic_rendezvous.py, _get_deadline).
#include <chrono>
#include <cstdint>

namespace ddprun {

/// Monotonic time, wall time and sleep. Implementations are thread-safe.
class Clock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  virtual ~Clock() = default;
  /// Monotonic now (for durations and deadlines).
  virtual TimePoint now() const = 0;
  /// Milliseconds since the Unix epoch (for instants shared between machines).
  virtual int64_t wallMs() const = 0;
  /// Blocks the caller for `duration` (a fake clock advances its time instead).
  virtual void sleepFor(std::chrono::milliseconds duration) = 0;
};

/// steady_clock, system_clock and std::this_thread::sleep_for.
class SystemClock : public Clock {
 public:
  TimePoint now() const override { return std::chrono::steady_clock::now(); }
  int64_t wallMs() const override;
  void sleepFor(std::chrono::milliseconds duration) override;
  /// The process-wide instance (stateless).
  static SystemClock& instance();
};

/// Milliseconds from `start` to now on the steady clock (for log lines that time a restart or a replacement).
inline double millisecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

/// A point in monotonic time by which an operation must end.
class Deadline {
 public:
  Deadline(const Clock& clock, std::chrono::milliseconds timeout) : clock_(&clock), at_(clock.now() + timeout) {}
  bool expired() const { return clock_->now() >= at_; }
  /// Time left, never negative (milliseconds, rounded down).
  std::chrono::milliseconds remaining() const {
    const auto left = at_ - clock_->now();
    return left.count() > 0 ? std::chrono::duration_cast<std::chrono::milliseconds>(left)
                            : std::chrono::milliseconds(0);
  }
  Clock::TimePoint at() const { return at_; }

 private:
  const Clock* clock_;
  Clock::TimePoint at_;
};

}  // namespace ddprun
