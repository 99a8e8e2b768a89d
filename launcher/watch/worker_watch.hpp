#pragma once
// Watches training, not only processes. On every tick it reads each rank's progress file and output time into
// the ProgressMonitor, samples the process trees of ranks that have gone quiet (ActivityMonitor), warns about
// stragglers once per window, and names a rank that exited 0 while its peers still run. When ranks pass their
// hang timeout it looks before it acts: it saves every rank's native stacks and asks the hang rule
// (hang_rule.hpp) whether anybody still works. Only a job in which nobody can move is reported as hung, with
// what was seen; the agent's policy then has the flight recorder dumps and Python tracebacks saved
// (saveTracebacksThen) and stops the group. Time comes from a Clock, the group and the machine through two
// interfaces (watch_ports.hpp), so the whole path runs in tests on fakes.
#include <boost/asio.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/clock.hpp"
#include "launcher/history/failure_summary.hpp"
#include "launcher/watch/activity_monitor.hpp"
#include "launcher/watch/flight_recorder.hpp"
#include "launcher/watch/hang_rule.hpp"
#include "launcher/watch/progress_monitor.hpp"
#include "launcher/watch/watch_ports.hpp"

namespace ddprun::launcher {

class WorkerWatch {
 public:
  /// One local rank's files in the current attempt.
  struct RankFiles {
    std::string progress;                ///< its DDPRUN_PROGRESS_FILE
    std::string stacks;                  ///< where its stacks go
    FlightRecorderFiles flightRecorder;  ///< its NCCL flight recorder's dump file and pipe
  };
  struct Settings {
    HangSettings hang;
    StragglerSettings straggler;
    bool pythonWorkers = false;  ///< tracebacks through faulthandler on SIGABRT
    bool multiNode = false;      ///< ranks on other nodes may be the cause of a local wait
  };
  /// Called on the loop with one record per hung rank (cause kHang) once the verdict is in.
  using HangCallback = std::function<void(std::vector<WorkerFailure>)>;
  /// Sets a key at the root of the workers' store; false when this agent does not serve it.
  using StoreKeySetter = std::function<bool(const std::string& key, const std::string& value)>;

  WorkerWatch(boost::asio::io_context& io, const Clock& clock, WorkerGroupView& group, EvidenceSource& evidence,
              Settings settings, StoreKeySetter setStoreKey, HangCallback onHang);
  /// The same, owning `evidence` (the agent's MachineEvidence): the watch is its one user.
  WorkerWatch(boost::asio::io_context& io, const Clock& clock, WorkerGroupView& group,
              std::unique_ptr<EvidenceSource> evidence, Settings settings, StoreKeySetter setStoreKey,
              HangCallback onHang);

  /// A new attempt's workers were started.
  void startAttempt(std::vector<RankFiles> files);
  /// One tick (the agent's --monitor-interval): observes every rank, draws the verdicts.
  void tick();
  /// Before a hung group is stopped, what the ranks can still tell: first their NCCL flight recorder dumps (each
  /// rank's pipe poked and the store's exception_dump key set; a bounded wait for the files, skipped when no rank
  /// has a pipe), then SIGABRT to every running Python worker, whose faulthandler dump goes to its stacks file.
  /// `then` runs on the loop once they have ended or after a bounded wait.
  void saveTracebacksThen(std::function<void()> then);
  /// A worker of the current attempt exited (its exit has reached the policy): ends the wait for tracebacks as
  /// soon as the aborted ranks are gone.
  void workerExited();
  /// Local rank `local` is being replaced in place (--restart-scope rank) and the attempt goes on: the others'
  /// silence counts from now (they wait for it), the new process is sampled from a new baseline, and a hang
  /// verdict given in this attempt (the replaced rank was its culprit) is over: the watch judges afresh. Returns
  /// true when it ended such a verdict. Take the failure records (completeRecords) before.
  bool rankReplaced(size_t local);
  /// Ctrl-Z: the time ddprun is stopped is nobody's silence.
  void pause();
  void resume();

  RankProgress progress(size_t local) const;
  std::optional<int64_t> bestStep() const { return monitor_.bestStep(); }
  /// Where this attempt started: the lowest step its ranks first reported.
  std::optional<int64_t> startStep() const { return monitor_.startStep(); }
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
    SteadyTime samePositionSince{};  ///< the first look of this suspicion in which the thread was where it is now
    /// The look that saw the thread enter its place (MainThreadPlace); unset while it is where the first look of this
    /// suspicion found it.
    std::optional<SteadyTime> placeEnteredAt;
    PythonPlace python;  ///< where the thread is in Python, from the reads since the first look
    /// PythonPosition::state of the reads since the first look (emptied when a read fails, restarted past
    /// kMaxPythonStates)
    std::set<uint64_t> pythonStates;
    std::set<uint64_t> pythonInstructions;  ///< PythonPosition::instruction of those reads
    SteadyTime pythonSameSince{};           ///< the last read that found a state not in pythonStates
    SteadyTime pythonReadAt{};
  };
  /// What is kept of a hung rank for its failure record.
  struct HangDetail {
    std::string file;
    std::string nativeFrame;
    std::string pythonFrame;
    std::string flightRecorderDump;  ///< its dump file, once written
  };

  void observeProgress(SteadyTime now);
  void sampleActivity(SteadyTime now);
  /// Reads where each rank that a look found running Python in its own code is in its script (a spin candidate).
  void readPythonPositions(SteadyTime now);
  void noteEarlyExits(SteadyTime now);
  void warnStragglers(const std::vector<Straggler>& stragglers);
  void judge(SteadyTime now);
  /// In an attempt where no rank has reported yet: ranks idle for twice the floor (or --hang-timeout) make a
  /// suspicion that the rule judges on the deadlock's signature alone (RuleSettings::unreported).
  std::optional<Suspicion> unreportedSuspicion(SteadyTime now) const;
  RuleSettings ruleSettings(const Suspicion& suspicion) const;
  std::vector<RankEvidence> gatherEvidence(const Suspicion& suspicion, SteadyTime now) const;
  void lookAtStacks();
  void declareHang(const Suspicion& suspicion, const std::vector<RankEvidence>& evidence, const Judgement& judgement,
                   const RuleSettings& rule);
  /// Asks every running rank for its flight recorder dump; returns the ranks whose pipe took the request.
  std::vector<size_t> requestFlightRecorderDumps();
  /// Checks whether the asked ranks' dumps are written (or the wait is over), then aborts the Python ranks.
  void waitForDumps();
  /// SIGABRT to the running Python ranks for their tracebacks, then waits for them.
  void abortForTracebacks();
  /// Checks whether the aborted Python workers are gone (or the wait is over), then continues.
  void waitForTracebacks();
  std::string rankList(const std::vector<size_t>& locals) const;

  boost::asio::io_context& io_;
  const Clock& clock_;
  WorkerGroupView& group_;
  EvidenceSource& evidence_;
  Settings settings_;
  std::unique_ptr<EvidenceSource> ownedEvidence_;
  StoreKeySetter setStoreKey_;
  HangCallback onHang_;
  ProgressMonitor monitor_;
  ActivityMonitor activity_;
  std::vector<RankFiles> files_;
  uint64_t attempt_ = 0;  ///< counts attempts and replacements: evidence taken before one is dropped
  // The current suspicion: from a rank passing its timeout until the job moves again.
  bool suspected_ = false;
  bool explained_ = false;     ///< "not a hang: …" was logged for this suspicion
  bool looking_ = false;       ///< stacks are being taken
  bool verdictGiven_ = false;  ///< this attempt was found hung
  std::map<size_t, Look> looks_;
  std::map<size_t, SteadyTime> earlyExits_;  ///< ranks that exited 0 while others ran, and when it was seen
  bool earlyExitNamed_ = false;
  std::map<size_t, HangDetail> hung_;  ///< this attempt's hung ranks (by local rank)
  /// What the watch waits for after a hang verdict.
  enum class Collecting { kNothing, kDumps, kTracebacks };
  Collecting collecting_ = Collecting::kNothing;
  int dumpSignalRank_ = -1;                ///< exception_dump's value: the rank that holds the others up
  std::map<size_t, DumpFileWatch> dumps_;  ///< ranks asked for a flight recorder dump, and their dump files
  SteadyTime dumpDeadline_{};
  std::vector<size_t> aborted_;            ///< Python workers sent SIGABRT for their tracebacks
  std::function<void()> afterTracebacks_;  ///< what follows the tracebacks (stopping the group)
  SteadyTime tracebackDeadline_{};
  SteadyTime pausedAt_{};
  uint64_t hangsDetected_ = 0;
  uint64_t stragglersFlagged_ = 0;
};

}  // namespace ddprun::launcher
