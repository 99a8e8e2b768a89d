#pragma once
// What a hung group can still tell before it is stopped, collected in order: first the NCCL flight recorder dumps
// (each rank's pipe poked and the store's exception_dump key set; a bounded wait for the files, skipped when no rank
// has a pipe), then SIGABRT to every running Python worker, whose faulthandler dump goes to its stacks file (a bounded
// wait for them to go). A state machine of its own: it looks at the dump files and the workers' exits itself, once a
// tick, and calls its one `onDone` when everything is in or the waits are over; the agent's policy only knows that it
// is collecting. It keeps what it learnt of each hung rank for that rank's failure record.
#include <boost/asio.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/clock.hpp"
#include "launcher/history/failure_summary.hpp"
#include "launcher/watch/evidence/flight_recorder.hpp"
#include "launcher/watch/watch_ports.hpp"

namespace ddprun::launcher {

class TracebackCollection {
 public:
  /// One local rank's files in the current attempt.
  struct RankFiles {
    std::string progress;                ///< its DDPRUN_PROGRESS_FILE
    std::string stacks;                  ///< where its stacks go
    FlightRecorderFiles flightRecorder;  ///< its NCCL flight recorder's dump file and pipe
  };
  /// Sets a key at the root of the workers' store; false when this agent does not serve it.
  using StoreKeySetter = std::function<bool(const std::string& key, const std::string& value)>;

  TracebackCollection(boost::asio::io_context& io, const Clock& clock, WorkerGroupView& group, bool pythonWorkers,
                      StoreKeySetter setStoreKey);

  /// A new attempt (or a regrouping): what was collected is forgotten and a collection under way ends unfinished.
  void reset(const std::vector<RankFiles>* files);
  /// Rank `local` was found hung, its main thread in `nativeFrame`; `culprit` names the rank that holds the others up
  /// (the exception_dump key's value).
  void noteHung(size_t local, const std::string& nativeFrame, int culprit);
  /// Starts collecting; `onDone` runs on the loop (never inside this call) once the dumps and tracebacks are in or
  /// their waits are over.
  void start(std::function<void()> onDone);
  /// Looks at the dump files and the aborted workers (called every tick).
  void tick();
  /// Completes the records of hung ranks: their stacks file, where their main threads were (native and Python), their
  /// flight recorder dump, and how they ended.
  std::vector<WorkerFailure> complete(std::vector<WorkerFailure> failures) const;

 private:
  /// What is kept of a hung rank for its failure record.
  struct Hung {
    std::string nativeFrame;
    std::string pythonFrame;
    std::string flightRecorderDump;  ///< its dump file, once written
  };
  enum class Step { kIdle, kDumps, kTracebacks };
  std::vector<size_t> requestDumps();
  void waitForDumps();
  void abortForTracebacks();
  void waitForTracebacks();
  std::string rankList(const std::vector<size_t>& locals) const;

  boost::asio::io_context& io_;
  const Clock& clock_;
  WorkerGroupView& group_;
  bool pythonWorkers_;
  StoreKeySetter setStoreKey_;
  const std::vector<RankFiles>* files_ = nullptr;
  uint64_t generation_ = 0;  ///< counts resets: a posted continuation of an earlier collection does nothing
  Step step_ = Step::kIdle;
  int culprit_ = -1;
  std::map<size_t, Hung> hung_;
  std::map<size_t, DumpFileWatch> dumps_;
  std::vector<size_t> aborted_;
  std::chrono::steady_clock::time_point deadline_{};
  std::function<void()> onDone_;
};

}  // namespace ddprun::launcher
