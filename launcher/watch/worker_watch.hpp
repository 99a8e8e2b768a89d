#pragma once
// Watches training, not only processes (torch's TimerServer kept apart from the agent, with a rule of its own). On
// every tick it reads each rank's progress into the ProgressMonitor, asks for samples of the ranks that have gone
// quiet (their process trees and, where a look found Python, their Python positions: read off the agent's loop by the
// EvidenceSource), warns about stragglers once per window, and names a rank that exited 0 while its peers still run.
// When ranks pass their hang timeout (the suspicion, suspicion.hpp) it looks before it acts: it saves every rank's
// native stacks and asks the hang rule (hang_rule.hpp) whether anybody still works. Only a job in which nobody can move
// is reported as hung, with what was seen; a rank that seems to spin, or works on while its peers wait, is reported
// (a warning every few minutes) and acted on only at --hang-busy-timeout unless the user asked otherwise. After a hang
// verdict the TracebackCollection gathers what the ranks can still tell. Time comes from a Clock, the group and the
// evidence through two interfaces (watch_ports.hpp), so the whole path runs in tests on fakes and replays recorded
// traces (evidence_trace.hpp).
#include <boost/asio.hpp>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/clock.hpp"
#include "launcher/history/failure_summary.hpp"
#include "launcher/watch/evidence/activity_monitor.hpp"
#include "launcher/watch/hang_rule.hpp"
#include "launcher/watch/progress_monitor.hpp"
#include "launcher/watch/suspicion.hpp"
#include "launcher/watch/traceback_collection.hpp"
#include "launcher/watch/watch_ports.hpp"

namespace ddprun::launcher {

class WorkerWatch {
 public:
  using RankFiles = TracebackCollection::RankFiles;
  struct Settings {
    HangSettings hang;
    StragglerSettings straggler;
    bool pythonWorkers = false;  ///< tracebacks through faulthandler on SIGABRT
    bool multiNode = false;      ///< ranks on other nodes may be the cause of a local wait
  };
  /// Called on the loop with one record per hung rank (cause kHang) once the verdict is in.
  using HangCallback = std::function<void(std::vector<WorkerFailure>)>;
  /// What the watch has found in this run, for the status page and the metrics.
  struct Counters {
    uint64_t hangs = 0;       ///< hang verdicts
    uint64_t stragglers = 0;  ///< straggler warnings
    uint64_t spins = 0;       ///< ranks reported as spinning while their peers waited (kSpinning)
  };

  WorkerWatch(boost::asio::io_context& io, const Clock& clock, WorkerGroupView& group, EvidenceSource& evidence,
              Settings settings, TracebackCollection::StoreKeySetter setStoreKey, HangCallback onHang);

  /// A new attempt's workers were started.
  void startAttempt(std::vector<RankFiles> files);
  /// One tick (the agent's --monitor-interval): observes every rank, draws the verdicts.
  void tick();
  /// Before a hung group is stopped, what the ranks can still tell (TracebackCollection); `then` runs on the loop once
  /// it is in or after a bounded wait.
  void saveTracebacksThen(std::function<void()> then);
  /// Local rank `local` is being replaced in place (--restart-scope rank) and the attempt goes on: the others'
  /// silence counts from now (they wait for it), the new process is sampled from a new baseline, and a hang
  /// verdict given in this attempt (the replaced rank was its culprit) is over: the watch judges afresh. Returns
  /// true when it ended such a verdict. Take the failure records (completeRecords) before.
  bool rankReplaced(size_t local);
  /// The group is being stopped (a failure, a signal, a hang's end): what its ranks do now (a peer gone, a handler
  /// that waits) is no verdict's evidence; the watch judges again from the next attempt.
  void groupStopping() { attempt_.verdictGiven = true; }
  /// Ctrl-Z: the time ddprun is stopped is nobody's silence.
  void pause();
  void resume();

  /// What the status page shows of a rank: its progress, and what the watch suspects of it.
  RankProgress progress(size_t local) const;
  std::optional<int64_t> bestStep() const { return monitor_.bestStep(); }
  /// Where this attempt started: the lowest step its ranks first reported.
  std::optional<int64_t> startStep() const { return monitor_.startStep(); }
  bool everReported() const { return monitor_.everReported(); }
  /// The hang timeout in effect now (seconds); nullopt while none is armed.
  std::optional<double> hangTimeoutSeconds() const;
  /// Completes the records of hung ranks, made before they were stopped (TracebackCollection::complete).
  std::vector<WorkerFailure> completeRecords(std::vector<WorkerFailure> failures) const;
  const Counters& counters() const { return counters_; }

 private:
  /// The current attempt: its files and what the watch noted in it.
  struct Attempt {
    std::vector<RankFiles> files;
    uint64_t id = 0;  ///< counts attempts and replacements: evidence asked for before one is dropped
    bool verdictGiven = false;
    bool sampling = false;                    ///< samples are being read
    uint64_t samplingEpoch = 0;               ///< counts looks: samples taken across a look are dropped
    std::map<size_t, SteadyTime> earlyExits;  ///< ranks that exited 0 while others ran, and when it was seen
    bool earlyExitNamed = false;
    std::map<size_t, std::string> suspected;  ///< what the watch reports of a rank (a spin), for the status page
    std::set<size_t> unreadableSaid;          ///< ranks whose unreadable Python was named
    SteadyTime pausedAt{};
  };

  void observeProgress(SteadyTime now);
  void noteEarlyExits(SteadyTime now);
  /// Asks for samples of the ranks that have gone quiet where a verdict may need them (off the loop): every
  /// kSampleEvery, and at once for a rank whose last sample is older than the suspicion (`stale`).
  void requestSamples(SteadyTime now);
  /// The running ranks that have neither stepped nor been sampled since the suspicion's evidence began to count.
  std::vector<size_t> staleRanks(SteadyTime now) const;
  void takeSamples(uint64_t id, uint64_t epoch, const std::vector<RankSample>& samples);
  void warnStragglers(const std::vector<Straggler>& stragglers);
  void judge(SteadyTime now);
  /// In an attempt where no rank has reported yet: ranks idle for twice the floor (or --hang-timeout) make a
  /// suspicion that the rule judges on the deadlock's signature alone (RuleSettings::unreported).
  std::optional<Suspicion> unreportedSuspicion(SteadyTime now) const;
  RuleSettings ruleSettings(const Suspicion& suspicion) const;
  std::vector<RankEvidence> gatherEvidence(const Suspicion& suspicion, SteadyTime now) const;
  void lookAtStacks();
  /// Logs why a suspected job is not hung: once per suspicion, and again every few minutes while some rank spins or
  /// works on while its peers wait in a collective.
  void explain(const Suspicion& suspicion, const std::vector<RankEvidence>& evidence, const Judgement& judgement,
               const RuleSettings& rule, SteadyTime now);
  void declareHang(const Suspicion& suspicion, const std::vector<RankEvidence>& evidence, const Judgement& judgement,
                   const RuleSettings& rule);
  std::string rankList(const std::vector<size_t>& locals) const;

  const Clock& clock_;
  WorkerGroupView& group_;
  EvidenceSource& evidence_;
  Settings settings_;
  HangCallback onHang_;
  ProgressMonitor monitor_;
  ActivityMonitor activity_;
  Attempt attempt_;
  SuspicionState suspicion_;
  TracebackCollection collection_;
  Counters counters_;
};

}  // namespace ddprun::launcher
