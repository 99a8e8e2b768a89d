#pragma once
// What this node remembers of a run, so that nothing that happened is lost: every attempt and the ranks its end
// named (AttemptLog, attempts.jsonl), the last failure summary, the restarts by reason, and how the job ended. The
// status page shows it while the job runs; at the end it is written next to the logs as status.json (the same
// document as /status.json) and report.html (the status page with that data inside, readable without a server).
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.hpp"
#include "launcher/history/attempt_end.hpp"
#include "launcher/history/attempt_log.hpp"
#include "launcher/history/failure_summary.hpp"
#include "launcher/status/agent_snapshot.hpp"

namespace ddprun::launcher {

class RunHistory {
 public:
  /// `runDir`: the run's log directory (attempts.jsonl, status.json and report.html go there). `logEvents`
  /// (--event-log-handler console): every attempt's start and end, and the job's end, is also one line of ddprun's
  /// log, "event: {JSON}" (torchelastic's Event fields: name, source, timestamp, metadata).
  RunHistory(std::string runDir, const Clock& clock, bool logEvents = false);

  void beginAttempt(int attempt, int ranks);
  /// The running attempt ended for `reason`; `failures` are complete records (stacks, exits)
  /// and `summary` their failure summary ("" when none failed).
  void endAttempt(AttemptEndReason reason, std::optional<int64_t> bestStep, const std::vector<WorkerFailure>& failures,
                  const std::string& summary);
  /// A rank was replaced in place (--restart-scope rank): its own line in attempts.jsonl, and a restart of kind
  /// "replacement" in the counters (the status page, the metrics).
  void rankReplaced(const WorkerFailure& failure, int generation);
  /// The replacement's communicator generation formed (every rank joined it).
  void replacementFormed(int generation);
  /// The job ended on this node with ddprun's `exitCode`; `how` in a few words.
  void jobEnded(int exitCode, const std::string& how);

  /// The attempt running or last run (TORCHELASTIC_RESTART_COUNT); 0 before the first.
  int currentAttempt() const;
  /// What first showed that the running attempt is ending (the latest sign counts): the next start is timed from it.
  void signSeen(FirstSign sign);
  /// Milliseconds since the last signSeen() (restart and replacement latency).
  double msSinceSign() const;
  /// The attempt's start line: "started 2 workers (role r: prog) in 3.1 ms" for the run's first, "attempt 2:
  /// restarted 2 workers, 24.0 ms after the failure was seen" after one of this ddprun's own attempts ended.
  /// `workers`: "2 workers"; `what`: "role r: prog"; `startMs`: how long the start took.
  std::string describeStart(int attempt, const std::string& workers, const std::string& what, double startMs) const;
  /// Copies what the history knows into a snapshot (attempts, last failure, restarts, end, start time).
  void fill(status::AgentSnapshot& snapshot) const;
  /// Writes status.json and report.html for the `final` snapshot into the run's directory; returns the report's
  /// path, or "" after one warning when it cannot be written.
  std::string writeReport(const status::AgentSnapshot& final) const;

  /// The files the report consists of (kept when the run's directory is cleaned).
  static const std::vector<std::string>& reportFiles();

 private:
  /// Logs one event (logEvents_ only).
  void event(const char* name, nlohmann::json metadata) const;

  std::string runDir_;
  const Clock& clock_;
  bool logEvents_;
  AttemptLog attempts_;
  int64_t startUnixMs_;
  std::string lastFailure_;
  std::optional<int64_t> lastFailureUnixMs_;
  std::map<std::string, uint64_t> restartsByReason_;
  uint64_t rankReplacements_ = 0;
  std::optional<status::JobEnd> ended_;
  std::optional<AttemptEndReason> lastEnd_;  ///< of this ddprun's last attempt that ended
  FirstSign sign_ = FirstSign::kFailure;
  Clock::TimePoint signSeen_;
};

}  // namespace ddprun::launcher
