#pragma once
// The elastic agent's decisions, without processes, sockets or clocks: one explicit state, one transition
// function, and the rules of PyTorch's SimpleElasticAgent._invoke_run (torch/distributed/elastic/agent/
// server/api.py): a worker failure stops the group and restarts it while --max-restarts remain, a membership
// change starts a new round without using up a restart, a signal stops everything and ends ddprun with
// 128 + the signal, a lost rendezvous backend ends it with 1. The agent feeds it events from its loop and
// performs the actions it asks for; tests feed it events and record the actions.
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "launcher/history/attempt_end.hpp"
#include "launcher/history/failure_summary.hpp"
#include "launcher/worker_exit_event.hpp"

namespace ddprun::launcher {

/// Where the agent is.
enum class AgentState {
  kRendezvous,  ///< joining a round (multi-node); no workers
  kRunning,     ///< the worker group runs
  kCollecting,  ///< the group hung: saving what the ranks can tell (Python tracebacks) before stopping it
  kStopping,    ///< the group was told to stop (see StopReason); waiting for every worker to exit
  kFinishing,   ///< this node is done and tells the rendezvous so (multi-node)
  kDone,        ///< ddprun ends with its exit code
};

/// Where kStopping and kCollecting stand.
enum class StopPhase {
  kWaiting,          ///< workers were told to stop (or, collecting, asked for their tracebacks); some still run
  kAllExited,        ///< collecting: every worker exited while the tracebacks were being saved
  kAwaitingVerdict,  ///< stopping after a multi-node failure: the workers are gone, confirmMembership() has not
                     ///< answered
};

/// Where a rank replacement stands (--restart-scope rank).
enum class ReplacementPhase {
  kNone,
  kCulpritChosen,   ///< a hang's evidence names one culprit; the tracebacks are being saved
  kKillingCulprit,  ///< killWorker() went out for the culprit; its exit has not come yet
  kClaiming,        ///< replaceWorker() went out; its answer has not come yet
  kForming,         ///< the replacement runs; its communicator generation has not formed yet
};

/// The replacement in progress: its phase and the rank it is for.
struct Replacement {
  ReplacementPhase phase = ReplacementPhase::kNone;
  WorkerFailure rank;      ///< the failed rank's record (or the hang's culprit's)
  bool afterHang = false;  ///< a hang's culprit: a refusal stops the group for the hang
};

/// Why the group is being stopped.
enum class StopReason { kNone, kFailure, kHang, kSignal, kMembershipChange, kBackendLost };

const char* toString(AgentState state);
const char* toString(StopReason reason);

/// How this node's part of the job ended, for the rendezvous (multi-node).
enum class NodeEnd {
  kSucceeded,  ///< every worker exited 0: close the rendezvous
  kFailed,     ///< the group failed with no restarts left: close the rendezvous
  kStopped,    ///< stopped by a signal: leave the round, so the others regroup at once
  kAbandoned,  ///< the rendezvous is unreachable or never formed: nothing to tell it
};

/// ddprun's exit code when restarts were spent on attempts that made no progress (ft_launcher's 93).
inline constexpr int kNoProgressExitCode = 93;

/// True when `failure` says one of the rank's peers was lost (its collective or store connection broke): only then
/// may a peer that exited 0 before it be its cause.
bool lostAPeer(const WorkerFailure& failure);
/// True when some rank of a hang's records waits on its peers in a collective.
bool waitOnPeers(const std::vector<WorkerFailure>& hung);

/// How the job ended on this node, in a few words ("every worker exited 0", "stopped by SIGINT", …).
std::string describe(NodeEnd end, int exitCode);

/// How an attempt ended, for its record (attempts.jsonl, the status page).
struct AttemptEnd {
  AttemptEndReason reason = AttemptEndReason::kSuccess;
  std::vector<WorkerFailure> failures;  ///< the ranks that failed on their own (and early exits), if any
};

/// What the policy asks the agent to do; called synchronously from the policy's event methods.
class AgentActions {
 public:
  virtual ~AgentActions() = default;
  /// Multi-node: join the next rendezvous round; onRoundComplete() follows.
  virtual void beginRendezvous() = 0;
  /// Starts the next attempt's workers (after a round, or directly on a single node).
  virtual void startWorkers() = 0;
  /// Sends `signal` to every worker's process group, SIGKILL after the stop timeout.
  virtual void stopWorkers(int signal) = 0;
  /// SIGKILL to every worker still running (a second signal).
  virtual void killWorkers() = 0;
  /// Saves what the hung ranks can still tell before they are stopped (Python tracebacks); the agent calls
  /// onTracebacksSaved() when done (later, never from inside this call).
  virtual void saveTracebacks() = 0;
  /// Every worker of the attempt has exited: records how it ended (before any restart or the end).
  virtual void endAttempt(const AttemptEnd& end) = 0;
  /// Prints the failure summary of the group's last attempt.
  virtual void reportFailures(const std::vector<WorkerFailure>& failures) = 0;
  /// --restart-scope rank, after a hang whose evidence names one culprit: SIGKILL to that local rank's process
  /// group only; its exit then reaches onWorkerExit() as ddprun's doing (the others keep running).
  virtual void killWorker(int localRank) { (void)localRank; }
  /// Ends this node: tells the rendezvous how (multi-node), then ddprun exits with `exitCode`.
  virtual void finishNode(NodeEnd end, int exitCode) = 0;
  /// A signal while finishing: the rendezvous' end-of-job wait (a store host's exit barrier) stops within
  /// about a second instead of waiting up to close_timeout for the other nodes; ddprun then exits as planned.
  virtual void cutFinishShort() = 0;
  /// Multi-node, after a worker failure: asks the rendezvous, for up to its nodeLossSeenWithin() (the membership
  /// window: rendezvous/rendezvous_handler.hpp), whether the round has
  /// lost a node (or has nodes waiting); the agent calls onMembershipVerdict() with the answer (later, never from
  /// inside this call).
  virtual void confirmMembership() = 0;
  /// --restart-scope rank: claims the job's replacement lock and announces the next communicator generation in the
  /// workers' store for the failed worker of `event`, while the others run on. The agent answers later (never from
  /// inside this call) with onReplacementClaimed(), then starts the replacement when it says so, or with
  /// onReplacementRefused() saying why it cannot (the whole group is then restarted instead).
  virtual void replaceWorker(const WorkerExitEvent& event) = 0;
};

/// What the rendezvous said within the membership window after a multi-node worker failure.
enum class MembershipVerdict {
  kUnchanged,         ///< the round goes on: the failure is the workers' own and spends a restart
  kRoundChanged,      ///< a node left (or nodes wait to join): a membership change
  kStoreUnreachable,  ///< the rendezvous store stopped answering: its host likely died (a membership change)
};

class AgentPolicy {
 public:
  /// `maxRestarts`: --max-restarts. `multiNode`: restarts go through a new rendezvous round.
  /// `maxNoProgressAttempts`: attempts in a row without a new best step before giving up (0: never).
  AgentPolicy(AgentActions& actions, int maxRestarts, bool multiNode, int maxNoProgressAttempts = 0);

  AgentState state() const { return state_; }
  StopReason stopReason() const { return stopReason_; }
  /// Restarts used so far (failures and hangs; membership changes do not count).
  int restartCount() const { return restartCount_; }
  int exitCode() const { return exitCode_; }

  /// Begins: the first round (multi-node) or the first attempt.
  void start();
  /// The rendezvous formed a round: the attempt starts.
  void onRoundComplete();
  /// The workers could not be started, or the rendezvous failed for good: ddprun ends with 1.
  void onFatalError();
  /// A worker exited; `allExited` when it was the last of its attempt.
  void onWorkerExit(const WorkerExitEvent& event, bool allExited);
  /// ddprun received `signal` (SIGINT, SIGTERM, …): the workers get `forwardAs` (0: the same signal), ddprun ends
  /// with 128 + `signal` once they are gone.
  void onSignal(int signal, int forwardAs = 0);
  /// The rendezvous saw nodes waiting to join or a node gone. While the workers stop for a failure, the stop
  /// becomes one for the membership change (no restart used).
  void onMembershipChange();
  /// The answer to confirmMembership(): what the rendezvous said around the failure.
  void onMembershipVerdict(MembershipVerdict verdict);
  /// The rendezvous backend is unreachable for good.
  void onBackendLost();
  /// The watch found the group hung (its stacks are saved): the tracebacks are saved next, then the group is
  /// stopped as on a failure. Ranks that exited 0 earlier in the attempt join the records (a likely cause).
  /// With rank replacement, a hang whose records name one culprit (every other rank waits on its peers) ends with
  /// only that rank killed (killWorker) and replaced, as a failed rank is; the group's rules apply when the
  /// replacement cannot be made.
  void onHang(std::vector<WorkerFailure> hung);
  /// The tracebacks asked for by saveTracebacks() are saved (or the wait for them is over).
  void onTracebacksSaved();
  /// Where the attempt that is ending started (the lowest step its ranks first reported) and the best step any rank
  /// reached in it; for the no-progress verdict, which counts the attempt when it fails (a failure or a hang): one that
  /// got past the best of the attempts before made progress; one that ends no further, for the same cause as the one
  /// before it (attemptCause), extends the run of attempts without progress (a new cause starts a new run); one ended
  /// by an outside signal (SIGKILL, SIGTERM, SIGINT, SIGHUP: pre-emption, the OOM killer, an operator) is not counted
  /// either way, since it had no fair chance. (NVIDIA ft_launcher's progress tracker counts cycles in which the
  /// checkpointed iteration did not move: fault_tolerance/progress_tracker.py.)
  void recordAttemptProgress(long long startStep, long long bestStep);
  /// The agent finished (finishNode completed).
  void onFinished();

  /// --restart-scope rank, for a program that supports it: a failed rank is replaced in place (replaceWorker) while
  /// others run, as long as restarts remain; the whole group restarts instead (one line says why) when no rank
  /// survived, when a second rank fails before the replacement's generation formed, or when the agent cannot.
  void enableRankReplacement() { replaceRanks_ = true; }
  bool replacesRanks() const { return replaceRanks_; }
  /// The answer to replaceWorker(): the announcement is in the store. True when the replacement should start now
  /// (it counts as a restart); false when the group stopped meanwhile.
  bool onReplacementClaimed();
  /// The answer to replaceWorker(): the replacement cannot be made (`why`: another one is forming, the store did not
  /// answer): the group is stopped and restarted as on a failure (or, for a hang's culprit, as on the hang).
  void onReplacementRefused(const std::string& why);
  /// The replacement asked for could not start after all: the group is stopped and restarted as on a failure.
  void onReplacementFailed(const WorkerFailure& failure);
  /// The replacement's generation formed (every rank joined it and the state moved): a later failure may be
  /// replaced again.
  void onReplacementFormed();
  /// Replacements so far (each also counts as a restart).
  int replacementCount() const { return replacementCount_; }
  /// The global rank being replaced now (its culprit being killed, its announcement or its generation forming); -1
  /// when none.
  int replacingRank() const;

 private:
  void transition(AgentState next, StopReason reason = StopReason::kNone);
  /// Stops the group with `signal`; a stop for ddprun's own signal ends with 128 + `exitSignal` (0: `signal`).
  void beginStop(StopReason reason, int signal, int exitSignal = 0);
  /// Every worker is gone: a multi-node failure first asks confirmMembership(), everything else concludes.
  void onAllStopped();
  /// Records the attempt's end and goes on as the stop reason says: a new round, a restart, or the end.
  void concludeStop();
  void restartOrGiveUp();
  /// A worker failed while the others run: asks for its replacement when the rules allow (true), else says why not
  /// (false). `afterHang`: the hang's culprit, killed by us (a refusal then stops the group for the hang).
  bool replaceInPlace(const WorkerExitEvent& event, bool allExited, bool afterHang = false);
  /// The hang's culprit, killed by us for its replacement, has exited: replaced, or the group stops for the hang.
  void onHungCulpritExit(const WorkerExitEvent& event, bool allExited);
  /// Out of kCollecting: stops the group for `reason`, or, when every worker has exited meanwhile, goes on as if
  /// it had stopped.
  void leaveCollecting(StopReason reason, int signal, int exitSignal = 0);
  /// Adds the attempt's early exits to failures_ when `theyBrokeSomething` (the failure that follows says a peer was
  /// lost, or a hung rank waits on its peers); forgets them either way. A rank that exited 0 is a failure only then.
  void addEarlyExits(bool theyBrokeSomething);
  bool running() const { return state_ == AgentState::kRunning; }

  AgentActions& actions_;
  const int maxRestarts_;
  const bool multiNode_;
  const int maxNoProgressAttempts_;
  AgentState state_ = AgentState::kRendezvous;
  StopReason stopReason_ = StopReason::kNone;
  int stopSignal_ = 0;
  int restartCount_ = 0;
  int exitCode_ = 0;
  std::vector<WorkerFailure> failures_;    ///< of the current attempt
  std::vector<WorkerFailure> earlyExits_;  ///< ranks of the current attempt that exited 0 while others ran
  long long bestStep_ = -1;                ///< best step of all attempts so far
  int attemptsWithoutProgress_ = 0;
  bool replaceRanks_ = false;
  int replacementCount_ = 0;
  StopPhase stopPhase_ = StopPhase::kWaiting;  ///< within kStopping and kCollecting
  Replacement replacement_;
  /// The ending attempt's first and best steps, once recorded (counted in restartOrGiveUp).
  std::optional<std::pair<long long, long long>> attemptSteps_;
  /// Updates the no-progress count with the attempt that just failed.
  void countAttemptProgress();
  /// What ended the attempt, for "the same cause": the stop reason and its root cause's kind, exit code or signal
  /// ("hang: hang", "failure: exit 1", "failure: signal SIGSEGV").
  std::string attemptCause() const;
  std::string lastCause_;  ///< of the last attempt counted
};

}  // namespace ddprun::launcher
