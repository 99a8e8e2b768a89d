#pragma once
// Watches training, not only processes. On every tick it reads each rank's progress file and output time into
// the ProgressMonitor, samples the process trees of ranks that have gone quiet (ActivityMonitor), warns about
// stragglers once per window, and names a rank that exited 0 while its peers still run. When ranks pass their
// hang timeout it looks before it acts: it saves every rank's native stacks and asks the hang rule
// (hang_rule.hpp) whether anybody still works. Only a job in which nobody can move is reported as hung, with
// what was seen; the agent's policy then has the Python tracebacks saved (saveTracebacksThen) and stops the
// group. Time comes from a Clock, the group and the machine through two interfaces (watch_ports.hpp), so the
// whole path runs in tests on fakes.
#include <boost/asio.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.hpp"
#include "launcher/failure_summary.hpp"
#include "launcher/watch/activity_monitor.hpp"
#include "launcher/watch/hang_rule.hpp"
#include "launcher/watch/progress_monitor.hpp"
#include "launcher/watch/watch_ports.hpp"

namespace ddprun::launcher {

class WorkerWatch {
 public:
  /// One local rank's files in the current attempt.
  struct RankFiles {
    std::string progress;  ///< its DDPRUN_PROGRESS_FILE
    std::string stacks;    ///< where its stacks go
  };
  struct Settings {
    HangSettings hang;
    StragglerSettings straggler;
    bool pythonWorkers = false;  ///< tracebacks through faulthandler on SIGABRT
    bool multiNode = false;      ///< ranks on other nodes may be the cause of a local wait
  };
  /// Called on the loop with one record per hung rank (cause kHang) once the verdict is in.
  using HangCallback = std::function<void(std::vector<WorkerFailure>)>;

  WorkerWatch(boost::asio::io_context& io, const Clock& clock, WorkerGroupView& group, EvidenceSource& evidence,
              Settings settings, HangCallback onHang);

  /// A new attempt's workers were started.
  void startAttempt(std::vector<RankFiles> files);
  /// One tick (the agent's --monitor-interval): observes every rank, draws the verdicts.
  void tick();
  /// Before a hung group is stopped: SIGABRT to every running Python worker, whose faulthandler dump goes to its
  /// stacks file; `then` runs on the loop once they have ended or after a bounded wait. At once (still on the
  /// loop) for C++ workers.
  void saveTracebacksThen(std::function<void()> then);
  /// Ctrl-Z: the time ddprun is stopped is nobody's silence.
  void pause();
  void resume();

  RankProgress progress(size_t local) const;
  std::optional<int64_t> bestStep() const { return monitor_.bestStep(); }
  bool everReported() const { return monitor_.everReported(); }
  /// The hang timeout in effect now (seconds); nullopt while none is armed.
  std::optional<double> hangTimeoutSeconds() const;
  /// Completes the records of hung ranks, made before they were stopped: where their main threads were (native
  /// and Python), their stacks file, and how they ended.
  std::vector<WorkerFailure> completeRecords(std::vector<WorkerFailure> failures) const;
  uint64_t hangsDetected() const { return hangsDetected_; }
  uint64_t stragglersFlagged() const { return stragglersFlagged_; }

 private:
  /// Stacks taken during the current suspicion, by local rank.
  struct Look {
    MainThread thread;
    SteadyTime at{};
  };
  /// What is kept of a hung rank for its failure record.
  struct HangDetail {
    std::string file;
    std::string nativeFrame;
    std::string pythonFrame;
  };

  void observeProgress(SteadyTime now);
  void sampleActivity(SteadyTime now);
  void noteEarlyExits(SteadyTime now);
  void warnStragglers(const std::vector<Straggler>& stragglers);
  void judge(SteadyTime now);
  std::vector<RankEvidence> gatherEvidence(const Suspicion& suspicion, SteadyTime now) const;
  void lookAtStacks();
  void declareHang(const Suspicion& suspicion, const std::vector<RankEvidence>& evidence, const Judgement& judgement);
  /// Checks whether the aborted Python workers are gone (or the wait is over), then continues.
  void waitForTracebacks();
  std::string rankList(const std::vector<size_t>& locals) const;

  boost::asio::io_context& io_;
  const Clock& clock_;
  WorkerGroupView& group_;
  EvidenceSource& evidence_;
  Settings settings_;
  HangCallback onHang_;
  ProgressMonitor monitor_;
  ActivityMonitor activity_;
  std::vector<RankFiles> files_;
  uint64_t attempt_ = 0;               ///< counts attempts: evidence of an earlier one is dropped
  // The current suspicion: from a rank passing its timeout until the job moves again.
  bool suspected_ = false;
  bool explained_ = false;             ///< "not a hang: …" was logged for this suspicion
  bool looking_ = false;               ///< stacks are being taken
  bool verdictGiven_ = false;          ///< this attempt was found hung
  std::map<size_t, Look> looks_;
  std::map<size_t, SteadyTime> earlyExits_;  ///< ranks that exited 0 while others ran, and when it was seen
  bool earlyExitNamed_ = false;
  std::map<size_t, HangDetail> hung_;  ///< this attempt's hung ranks (by local rank)
  boost::asio::steady_timer tracebackWait_;
  std::vector<size_t> aborted_;            ///< Python workers sent SIGABRT for their tracebacks
  std::function<void()> afterTracebacks_;  ///< what follows the tracebacks (stopping the group)
  SteadyTime tracebackDeadline_{};
  SteadyTime pausedAt_{};
  uint64_t hangsDetected_ = 0;
  uint64_t stragglersFlagged_ = 0;
};

}  // namespace ddprun::launcher
