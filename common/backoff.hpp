#pragma once
// Delays between retries that grow geometrically up to a cap, as c10d's Backoff.hpp
// (ExponentialBackoffWithJitter, without the jitter: ddprun's retries are few and their pace is logged).
#include <algorithm>
#include <chrono>

namespace ddprun {

class Backoff {
 public:
  /// First delay `initial`, each next one `factor` times longer, never above `max`.
  Backoff(std::chrono::milliseconds initial, std::chrono::milliseconds max, int factor = 2)
      : initial_(initial), max_(max), factor_(factor), next_(initial) {}

  /// The delay to wait before the next retry (milliseconds).
  std::chrono::milliseconds next() {
    const auto delay = next_;
    next_ = std::min(next_ * factor_, max_);
    return delay;
  }
  /// Starts again from the initial delay (after a success).
  void reset() { next_ = initial_; }

 private:
  std::chrono::milliseconds initial_;
  std::chrono::milliseconds max_;
  int factor_;
  std::chrono::milliseconds next_;
};

}  // namespace ddprun
