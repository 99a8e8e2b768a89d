#pragma once
// The report printed when the worker group fails for good, after torchelastic's ChildFailedError
// (torch/distributed/elastic/multiprocessing/errors/__init__.py): the root cause is the failure with the
// earliest timestamp (from the worker's error file when it wrote one, else when ddprun saw it exit).
#include <chrono>
#include <string>
#include <vector>

#include "launcher/process/worker_exit.hpp"

namespace ddprun::launcher {

/// What ended a rank, as the failure records carry it (never a message prefix).
enum class FailureCause {
  kExit,           ///< exited with a non-zero code
  kSignal,         ///< killed by a signal
  kHang,           ///< stopped by ddprun after its hang verdict
  kOutputSilence,  ///< stopped by ddprun after --output-timeout
  kEarlyExit,      ///< exited 0 while its peers still ran
};

const char* toString(FailureCause cause);

/// One failed worker of the last attempt.
struct WorkerFailure {
  int globalRank = 0;
  int localRank = 0;
  int pid = 0;
  FailureCause cause = FailureCause::kExit;
  WorkerExit exit;
  std::string errorFile;           ///< the TORCHELASTIC_ERROR_FILE given to it
  std::string message;             ///< from the error file, or a description of the exit
  std::string traceback;           ///< the error file's py_callstack (torchrun's "traceback :" field), else the end
                                   ///< of its stderr (StderrTail); may be empty
  bool fromStderr = false;         ///< message and traceback come from its stderr (it wrote no usable error file)
  std::string stderrTailFile;      ///< where that end of its stderr was saved; "" when not
  std::string stacksFile;          ///< where its stacks were saved (hangs); "" when none
  std::string flightRecorderDump;  ///< its NCCL flight recorder dump (hangs); "" when none
  int64_t timestamp = 0;           ///< seconds since the epoch (error file's, else exit time)
  /// Orders failures in time: the error file's modification time (ns) when it exists, else when ddprun
  /// saw the exit. Error-file timestamps have whole seconds, too coarse to tell a failure from the
  /// peer errors it causes a millisecond later.
  std::chrono::system_clock::time_point order;
  bool fromErrorFile = false;
  /// A hung rank whose main thread waits for its peers inside a collective: a victim of another rank's hang.
  /// In lockstep DDP every rank stops at the same step, so time cannot tell them apart; the stacks can.
  bool waitsOnPeers = false;
  std::string hint;  ///< what to do about it, when ddprun knows (one line in the summary); "" when nothing
};

/// Fills message and timestamp from the worker's error file when it exists and parses (torchelastic's contract: the
/// error file wins), else, for a failed exit, message and traceback from `stderrTail` (StderrTail::text: its last
/// traceback block or lines; the message its exception or error line); the cause from the exit (kEarlyExit for an exit
/// 0, which only counts as a failure while its peers still run).
WorkerFailure describeFailure(int globalRank, int localRank, int pid, const WorkerExit& exit,
                              const std::string& errorFile, const std::string& stderrTail = "");

/// `text` cut to at most `maxLines` lines and `maxBytes` bytes, keeping its end (a traceback's last frames and its
/// exception) after a first line "[… N earlier lines not shown<where>]"; `where` names the whole text's place.
std::string keepLastLines(const std::string& text, size_t maxLines, size_t maxBytes, const std::string& where = "");

/// Index of the root cause in `failures`: the earliest `order` among those that do not wait on their peers
/// (all of them when every one does). Non-empty input.
size_t rootCauseIndex(const std::vector<WorkerFailure>& failures);

/// One phrase naming the likely cause behind `failures[root]` for hangs and early exits; "" for a plain exit
/// or signal (the record says it all).
std::string likelyCause(const std::vector<WorkerFailure>& failures, size_t root);

/// The multi-line summary in torchrun's layout; `program` names what failed, `role` its --role. Ends with the
/// likely cause when the records tell one (a hang's culprit, an early exit).
std::string formatFailureSummary(const std::string& program, const std::string& role,
                                 const std::vector<WorkerFailure>& failures, const std::string& host);

/// True when the error file at `errorFile` exists and was written before `instant`: the worker failed on its
/// own before ddprun's stop signal could have reached it (torchelastic's error file as evidence).
bool errorFileWrittenBefore(const std::string& errorFile, std::chrono::system_clock::time_point instant);

}  // namespace ddprun::launcher
