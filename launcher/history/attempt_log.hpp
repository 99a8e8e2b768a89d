#pragma once
// The history of a run's attempts on this node: kept for the status page, and appended as one JSON line per
// attempt to <run log dir>/attempts.jsonl, so that a finished job can be read back by tools:
// {"attempt", "start", "end", "reason", "ranks", "best_step", "culprits"} (times in Unix milliseconds; culprits as
// /status.json lists them: rank, local_rank, cause, exit_code, signal, signal_name, message, stacks, error_file).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.hpp"
#include "launcher/history/failure_summary.hpp"
#include "launcher/status/agent_snapshot.hpp"

namespace ddprun::launcher {

/// The ranks an attempt's failures name: those that did not only wait for their peers (all of them when every
/// one did), the root cause first.
std::vector<status::Culprit> culpritsOf(const std::vector<WorkerFailure>& failures);

class AttemptLog {
 public:
  AttemptLog(std::string path, const Clock& clock) : path_(std::move(path)), clock_(clock) {}

  /// Attempt `attempt` started with `ranks` local ranks.
  void begin(int attempt, int ranks);
  /// The running attempt ended (`reason`: "success", "failure", "hang", "signal", "membership change", …);
  /// appends its line to the file (a write error is one warning, never fatal).
  void end(const std::string& reason, std::optional<int64_t> bestStep, const std::vector<WorkerFailure>& failures);
  /// A rank of the running attempt was replaced in place (--restart-scope rank): appends a line of its own,
  /// {"attempt", "event": "replacement", "time", "rank", "generation", "culprits"}, while the attempt goes on.
  /// The record keeps it too (AttemptRecord::replacements), for the status page.
  void replaced(const WorkerFailure& failure, int generation);
  /// Every rank joined communicator generation `generation` of the running attempt: its replacement is complete.
  void replacementFormed(int generation);
  /// Every attempt so far, the running one last (without an end).
  const std::vector<status::AttemptRecord>& records() const { return records_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const Clock& clock_;
  std::vector<status::AttemptRecord> records_;
};

}  // namespace ddprun::launcher
