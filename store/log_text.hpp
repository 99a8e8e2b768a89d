#pragma once
// Log hygiene for bytes that come from clients: they are escaped before they reach a log line (a key
// holding "\n[info] ..." or an ANSI escape must not forge or repaint ddprun's log), and repeated
// warnings are rate-limited with a count, so a flood of bad connections cannot flood the log.
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "common/clock.hpp"

namespace ddprun::store {

/// `bytes` as printable ASCII: \n, \r, \t, \\ and \xNN for every other byte outside 0x20..0x7E; cut to
/// `maxBytes` input bytes with the full length noted.
std::string escapeForLog(std::string_view bytes, size_t maxBytes = 96);

/// Writes warnings through spdlog, at most `burst` per category per `interval` of `clock`'s time; the ones held
/// back are counted and reported with the next line of that category ("(N similar warnings suppressed)").
class WarningLimiter {
 public:
  /// `clock` (a fake one in tests) must outlive the limiter.
  explicit WarningLimiter(std::chrono::milliseconds interval = std::chrono::seconds(10), int burst = 5,
                          const Clock& clock = SystemClock::instance())
      : interval_(interval), burst_(burst), clock_(clock) {}

  /// Logs `line` unless its `category` (a limit name, "malformed", …) is over its rate.
  void warn(const std::string& category, const std::string& line);

 private:
  struct Window {
    Clock::TimePoint start;
    int written = 0;
    uint64_t suppressed = 0;
  };
  std::chrono::milliseconds interval_;
  int burst_;
  const Clock& clock_;
  std::map<std::string, Window> windows_;
};

}  // namespace ddprun::store
