#pragma once
// The history of a run's attempts on this node: kept for the status page, and appended as one JSON line per
// attempt to <run log dir>/attempts.jsonl ({"attempt", "start", "end", "reason", "ranks", "best_step"}; times
// in Unix milliseconds), so that a finished job can be read back by tools.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "launcher/status/agent_snapshot.hpp"

namespace ddprun::launcher {

class AttemptLog {
 public:
  explicit AttemptLog(std::string path) : path_(std::move(path)) {}

  /// Attempt `attempt` started with `ranks` local ranks.
  void begin(int attempt, int ranks);
  /// The running attempt ended (`reason`: "success", "failure", "hang", "signal", "membership change", …);
  /// appends its line to the file (a write error is one warning, never fatal).
  void end(const std::string& reason, std::optional<int64_t> bestStep);
  /// Every attempt so far, the running one last (without an end).
  const std::vector<status::AttemptRecord>& records() const { return records_; }

 private:
  std::string path_;
  std::vector<status::AttemptRecord> records_;
};

}  // namespace ddprun::launcher
