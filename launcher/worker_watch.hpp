#pragma once
// Watches training, not only processes: on every tick it reads each rank's progress file and output time
// into the ProgressMonitor, warns about stragglers once per window, and when ranks stop making progress it
// saves where every local rank is before anything is killed: the native stacks of all threads now, and, for
// Python workers (started with PYTHONFAULTHANDLER=1), every thread's traceback when the group is stopped.
// Then it tells the agent, which stops the group as on a failure.
#include <boost/asio.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "launcher/failure_summary.hpp"
#include "launcher/progress_monitor.hpp"
#include "launcher/stack_collector.hpp"
#include "launcher/worker_group.hpp"

namespace ddprun::launcher {

class WorkerWatch {
 public:
  /// One local rank's files in the current attempt.
  struct RankFiles {
    std::string progress;  ///< its DDPRUN_PROGRESS_FILE
    std::string stacks;    ///< where its stacks go on a hang
  };
  /// Called on the loop with the stalled ranks (their failure records), once their native stacks are saved.
  using HangCallback = std::function<void(std::vector<WorkerFailure>)>;

  WorkerWatch(boost::asio::io_context& io, ChildReaper& reaper, WorkerGroup& group, HangSettings hang,
              StragglerSettings straggler, bool pythonWorkers, HangCallback onHang);

  /// A new attempt's workers were started.
  void startAttempt(std::vector<RankFiles> files);
  /// One tick (the agent's --monitor-interval): observes every rank, draws the verdicts.
  void tick();
  /// Before a hung group is stopped: SIGABRT to every running Python worker, whose faulthandler dump goes
  /// to its stacks file; `then` runs once they have ended or after a bounded wait. At once for C++ workers.
  void saveTracebacksThen(std::function<void()> then);
  /// True while saveTracebacksThen() waits for the dumps.
  bool savingTracebacks() const { return static_cast<bool>(afterTracebacks_); }
  /// Ctrl-Z: the time ddprun is stopped is nobody's silence.
  void pause();
  void resume();

  RankProgress progress(size_t local) const;
  std::optional<int64_t> bestStep() const { return monitor_.bestStep(); }
  bool everReported() const { return monitor_.everReported(); }
  /// Adds where the hung ranks' main threads were (native and Python) to their summary records, and marks
  /// the ranks that wait in a collective (never the summary's root cause while another rank does not).
  std::vector<WorkerFailure> withStacks(std::vector<WorkerFailure> failures) const;
  uint64_t hangsDetected() const { return hangsDetected_; }
  uint64_t stragglersFlagged() const { return stragglersFlagged_; }

 private:
  /// What is known about a hung rank's stacks.
  struct HangDetail {
    std::string file;
    std::string nativeFrame;
    std::string pythonFrame;
  };

  void onStalls(const std::vector<Stall>& stalls);
  void warnStragglers(const std::vector<Straggler>& stragglers);
  WorkerFailure hangFailure(const Stall& stall) const;
  /// Logs which hung ranks are stuck in their own code while the others wait for them in a collective.
  void nameLikelyCause() const;
  /// Polls (20 ms) until the aborted Python workers are gone or the budget is spent, then continues.
  void waitForTracebacks();

  boost::asio::io_context& io_;
  WorkerGroup& group_;
  StackCollector collector_;
  ProgressMonitor monitor_;
  StragglerSettings straggler_;
  bool pythonWorkers_;
  HangCallback onHang_;
  std::vector<RankFiles> files_;
  std::map<size_t, HangDetail> hung_;  ///< this attempt's hung ranks (by local rank)
  bool collecting_ = false;            ///< native stacks are being saved
  boost::asio::steady_timer tracebackWait_;
  std::vector<size_t> aborted_;            ///< Python workers sent SIGABRT for their tracebacks
  std::function<void()> afterTracebacks_;  ///< what follows the tracebacks (stopping the group)
  SteadyTime tracebackDeadline_{};
  SteadyTime pausedAt_{};
  uint64_t hangsDetected_ = 0;
  uint64_t stragglersFlagged_ = 0;
};

}  // namespace ddprun::launcher
