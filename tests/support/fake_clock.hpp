#pragma once
// Test helper: a Clock whose time moves only when someone sleeps on it or calls advance(), so timeout
// rules are tested in microseconds of real time, with no sleeps and no wall-time asserts.
#include <atomic>
#include <chrono>

#include "common/clock.hpp"

namespace ddprun::test {

class FakeClock : public Clock {
 public:
  TimePoint now() const override { return TimePoint(std::chrono::milliseconds(nowMs_.load())); }
  int64_t wallMs() const override { return kEpochMs + nowMs_.load(); }
  /// Advances the fake time by `duration` at once.
  void sleepFor(std::chrono::milliseconds duration) override {
    nowMs_ += duration.count();
    slept_ += duration.count();
    ++sleeps_;
  }
  void advance(std::chrono::milliseconds duration) { nowMs_ += duration.count(); }
  /// Total fake time slept, and the number of sleeps.
  std::chrono::milliseconds slept() const { return std::chrono::milliseconds(slept_.load()); }
  int sleeps() const { return sleeps_.load(); }

 private:
  static constexpr int64_t kEpochMs = 1'700'000'000'000;  // any fixed wall time
  std::atomic<int64_t> nowMs_{1'000'000};
  std::atomic<int64_t> slept_{0};
  std::atomic<int> sleeps_{0};
};

}  // namespace ddprun::test
