#pragma once
// The data contract between the agent and its status page: plain values the agent copies on its own
// thread, once per HTTP request. The status server never sees the agent, only these structs (after
// torch's health_check_server.py, which is handed only a callback). Times are wall-clock Unix
// milliseconds; ages and rates are seconds and steps per second.
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ddprun::status {

/// Every value of AgentSnapshot::state, in the order an agent passes through them; a job that ended with a non-zero
/// exit code is "failed" instead of "done".
inline constexpr std::array<const char*, 7> kAgentStates = {"rendezvous", "running", "collecting", "stopping",
                                                            "finishing",  "done",    "failed"};
/// Every value of RankSnapshot::state.
inline constexpr std::array<const char*, 6> kRankStates = {"starting", "running", "exited",
                                                           "failed",   "stopped", "hung"};

/// One local rank's worker process as the agent last saw it.
struct RankSnapshot {
  int localRank = 0;
  int globalRank = 0;
  int pid = 0;                             ///< 0 before the process exists
  std::string state = "starting";          ///< one of kRankStates
  std::optional<int64_t> step;             ///< last step the worker reported; none until it reports
  std::string phase;                       ///< phase reported with the step (e.g. "checkpoint"); "" when none
  double stepsPerSecond = 0;               ///< over the agent's sliding window; 0 while unknown
  std::optional<double> samplesPerSecond;  ///< from the samples field, over the same window; none unless reported
  uint64_t stepsTotal = 0;                 ///< steps advanced over every attempt of this run (a counter)
  std::vector<std::pair<std::string, double>> scalars;  ///< the last report's scalars (e.g. {"loss", 0.31})
  std::vector<double> stepRateHistory;       ///< recent steps/s samples for a sparkline, oldest first, newest last
  std::optional<double> progressAgeSeconds;  ///< since the last progress report; none before the first
  std::optional<double> outputAgeSeconds;    ///< since the last stdout/stderr line; none before the first
  std::optional<int> exitCode;               ///< exit status, once the process exited normally
  std::optional<int> signal;                 ///< terminating signal number, once a signal ended it
  bool hung = false;                         ///< flagged by hang detection in this attempt
  bool straggler = false;                    ///< slower than the median for a whole window
  bool outputHeld = false;                   ///< ddprun does not read its output now: the console is full
  std::string suspected;                     ///< what the hang watch reports without acting (a spin); "" none
};

/// Counters of the agent's own rendezvous store, when this node hosts it.
struct StoreStats {
  uint64_t connections = 0;  ///< open client connections
  uint64_t keys = 0;         ///< keys held
  uint64_t operations = 0;   ///< requests served since the store started
};

/// A rank named by an attempt's end: one that failed on its own, hung and held the others up, or exited early.
struct Culprit {
  int rank = 0;
  int localRank = 0;
  std::string cause;               ///< "exit", "signal", "hang", "output silence", "early exit"
  std::optional<int> exitCode;     ///< when it exited
  std::optional<int> signal;       ///< when a signal ended it
  std::string message;             ///< first line of its error (or of the hang verdict)
  std::string stacksFile;          ///< where its stacks are; "" when none
  std::string flightRecorderDump;  ///< its NCCL flight recorder dump; "" when none
  std::string errorFile;           ///< its torchelastic error file, when it wrote one; "" otherwise
  std::string traceback;           ///< its error file's traceback, else the end of its stderr (bounded); "" when none
  std::string stderrTailFile;      ///< where the end of its stderr was saved (no error file); "" otherwise
};

/// A rank replaced in place while its attempt went on (--restart-scope rank).
struct Replacement {
  int64_t unixMs = 0;                   ///< when ddprun announced it (the failed rank's exit was seen)
  int rank = 0;                         ///< the global rank replaced
  int generation = 0;                   ///< the communicator generation the replacement joined
  std::optional<int64_t> formedUnixMs;  ///< when every rank had joined that generation; none while forming
  std::optional<Culprit> failed;        ///< the replaced rank's record: how it failed (exit, signal, hang)
};

/// One attempt (one start of the worker group) of this run on this node.
struct AttemptRecord {
  int attempt = 0;
  int64_t startUnixMs = 0;
  std::optional<int64_t> endUnixMs;  ///< none while the attempt runs
  std::string reason;                ///< how it ended ("failure", "hang", "membership change", …); "" while running
  int ranks = 0;                     ///< local ranks started
  std::optional<int64_t> bestStep;   ///< highest step any rank reported in this attempt
  std::vector<Culprit> culprits;     ///< the ranks its end names (empty for a success)
  std::vector<Replacement> replacements;  ///< ranks replaced in place during the attempt, oldest first
};

/// How the job ended on this node.
struct JobEnd {
  int64_t unixMs = 0;
  int exitCode = 0;  ///< ddprun's exit code
  std::string how;   ///< "succeeded", "failed", "no progress", "stopped by SIGINT", …
};

/// Totals since the agent started.
struct Counters {
  uint64_t hangsDetected = 0;
  uint64_t stragglersFlagged = 0;  ///< straggler warnings issued (at most one per rank and window)
  uint64_t restarts = 0;           ///< every group restart, including those that do not count against max
  /// The same, by what ended the attempt before; "replacement" counts ranks replaced in place (each uses a
  /// restart, though the group goes on).
  std::map<std::string, uint64_t> restartsByReason;
  uint64_t rankReplacements = 0;  ///< ranks replaced in place (--restart-scope rank)
  uint64_t spinsReported = 0;     ///< ranks reported as spinning while their peers waited (not acted on)
};

/// Everything the status page shows, copied from the agent on its thread.
struct AgentSnapshot {
  std::string runId;     ///< the rendezvous/run id (job id)
  std::string node;      ///< this machine's host name
  std::string role;      ///< worker role (torchrun's --role)
  int groupRank = 0;     ///< this node's rank among the nodes of the current round
  int nodes = 1;         ///< nodes in the current round
  int round = 0;         ///< rendezvous round
  int attempt = 0;       ///< current attempt on this node, from 0
  int restartsUsed = 0;  ///< restarts that counted against maxRestarts
  int maxRestarts = 0;
  std::string state = "rendezvous";          ///< one of kAgentStates
  std::string stopReason;                    ///< why the group is stopping or stopped; "" otherwise
  int worldSize = 0;                         ///< ranks in the whole job (all nodes)
  int64_t startUnixMs = 0;                   ///< when the agent started
  int64_t snapshotUnixMs = 0;                ///< when this snapshot was taken
  std::vector<RankSnapshot> ranks;           ///< local ranks, by local rank
  std::optional<StoreStats> store;           ///< none when this node does not host the store
  std::vector<AttemptRecord> attempts;       ///< oldest first
  std::string lastFailure;                   ///< the last failure summary (multi-line); "" when none
  std::optional<int64_t> lastFailureUnixMs;  ///< when it happened
  std::optional<double> hangTimeoutSeconds;  ///< the hang timeout in effect now; none while unarmed
  std::optional<JobEnd> ended;               ///< set once the job has ended
  Counters counters;
};

}  // namespace ddprun::status
