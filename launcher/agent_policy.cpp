#include "launcher/agent_policy.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <csignal>
#include <string_view>

namespace ddprun::launcher {

namespace {

AttemptEndReason endReasonOf(StopReason reason) {
  switch (reason) {
    case StopReason::kNone: return AttemptEndReason::kSuccess;
    case StopReason::kFailure: return AttemptEndReason::kFailure;
    case StopReason::kHang: return AttemptEndReason::kHang;
    case StopReason::kSignal: return AttemptEndReason::kSignal;
    case StopReason::kMembershipChange: return AttemptEndReason::kMembershipChange;
    case StopReason::kBackendLost: return AttemptEndReason::kBackendLost;
  }
  return AttemptEndReason::kFailure;
}

}  // namespace

bool lostAPeer(const WorkerFailure& failure) {
  // What the collectives and the store say when a peer's process is gone: Gloo ("Connection closed by peer",
  // "Connection reset by peer"), a socket ("Broken pipe"), NCCL ("remote process exited", ncclRemoteError, an
  // aborted communicator), torch 2.x's DistNetworkError, a collective's timeout, and the C++ worker's "a peer rank is
  // dead or stuck".
  static constexpr std::array<std::string_view, 11> kPhrases = {
      "connection closed by peer", "connection reset by peer", "broken pipe",       "remote process exited",
      "ncclremoteerror",           "communicator was aborted", "distnetworkerror",  "timed out waiting",
      "a peer rank is dead",       "failed to recv",           "connection refused"};
  std::string text = failure.message + "\n" + failure.traceback;
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return std::any_of(kPhrases.begin(), kPhrases.end(),
                     [&](std::string_view phrase) { return text.find(phrase) != std::string::npos; });
}

bool waitOnPeers(const std::vector<WorkerFailure>& hung) {
  return std::any_of(hung.begin(), hung.end(), [](const WorkerFailure& f) { return f.waitsOnPeers; });
}

const char* toString(AgentState state) {
  switch (state) {
    case AgentState::kRendezvous: return "rendezvous";
    case AgentState::kRunning: return "running";
    case AgentState::kCollecting: return "collecting";
    case AgentState::kStopping: return "stopping";
    case AgentState::kFinishing: return "finishing";
    case AgentState::kDone: return "done";
  }
  return "?";
}

const char* toString(StopReason reason) {
  switch (reason) {
    case StopReason::kNone: return "none";
    case StopReason::kFailure: return "failure";
    case StopReason::kHang: return "hang";
    case StopReason::kSignal: return "signal";
    case StopReason::kMembershipChange: return "membership change";
    case StopReason::kBackendLost: return "backend lost";
  }
  return "?";
}

std::string describe(NodeEnd end, int exitCode) {
  switch (end) {
    case NodeEnd::kSucceeded: return "every worker exited 0";
    case NodeEnd::kFailed:
      return exitCode == kNoProgressExitCode ? "gave up: restarts made no progress" : "failed with no restarts left";
    case NodeEnd::kStopped: return exitCode > 128 ? "stopped by " + signalName(exitCode - 128) : "stopped by a signal";
    case NodeEnd::kAbandoned: return "the rendezvous failed or its backend was lost";
  }
  return "ended";
}

AgentPolicy::AgentPolicy(AgentActions& actions, int maxRestarts, bool multiNode, int maxNoProgressAttempts)
    : actions_(actions),
      maxRestarts_(maxRestarts),
      multiNode_(multiNode),
      maxNoProgressAttempts_(maxNoProgressAttempts) {}

void AgentPolicy::transition(AgentState next, StopReason reason) {
  if (next == AgentState::kStopping || next == AgentState::kCollecting) {
    spdlog::debug("agent: {} -> {} ({})", toString(state_), toString(next), toString(reason));
  } else {
    spdlog::debug("agent: {} -> {}", toString(state_), toString(next));
  }
  state_ = next;
  stopReason_ = reason;
  stopPhase_ = StopPhase::kWaiting;
}

void AgentPolicy::start() {
  if (multiNode_) {
    transition(AgentState::kRendezvous);
    actions_.beginRendezvous();
  } else {
    onRoundComplete();
  }
}

void AgentPolicy::onRoundComplete() {
  // A round completing after ddprun began to stop (a signal while joining) starts nothing.
  if (state_ != AgentState::kRendezvous) return;
  failures_.clear();
  earlyExits_.clear();
  replacement_ = {};
  transition(AgentState::kRunning);
  actions_.startWorkers();
}

void AgentPolicy::onFatalError() {
  // A node already on its way out (a signal) ends with its own exit code, not this one.
  if (state_ == AgentState::kFinishing || state_ == AgentState::kDone) return;
  exitCode_ = 1;
  transition(AgentState::kFinishing);
  actions_.finishNode(NodeEnd::kAbandoned, 1);
}

void AgentPolicy::onWorkerExit(const WorkerExitEvent& event, bool allExited) {
  const bool ownFailure = !event.exit.succeeded() && !event.stoppedByUs;
  if (state_ == AgentState::kCollecting) {
    // Ranks aborted for their tracebacks end now; the summary waits until the tracebacks are saved. Any exit
    // meanwhile makes a replacement after the hang a guess: the group's rules decide.
    if (replacement_.phase == ReplacementPhase::kCulpritChosen) replacement_ = {};
    if (ownFailure) failures_.push_back(event.failure);
    if (allExited) stopPhase_ = StopPhase::kAllExited;
    return;
  }
  if (state_ == AgentState::kStopping) {
    // A worker that failed on its own before our signal reached it is a failure too; it may even be the
    // root cause (torchelastic records these as well).
    if ((stopReason_ == StopReason::kFailure || stopReason_ == StopReason::kHang) && ownFailure) {
      failures_.push_back(event.failure);
    }
    if (allExited) onAllStopped();
    return;
  }
  if (!running()) return;
  if (replacement_.phase == ReplacementPhase::kKillingCulprit && event.globalRank == replacement_.rank.globalRank) {
    onHungCulpritExit(event, allExited);
    return;
  }
  if (!event.exit.succeeded()) {
    // A peer that left with exit code 0 before is the likely cause of this failure only when the failure says a peer
    // was lost (its collective broke); a rank failing of its own error (a KeyError) is not a victim of it.
    const bool victim = lostAPeer(event.failure);
    std::string earlier;
    for (const auto& early : earlyExits_) {
      if (victim) earlier += (earlier.empty() ? "; rank " : ", rank ") + std::to_string(early.globalRank);
    }
    if (!earlier.empty()) earlier += " exited 0 before it while its peers still ran, the likely cause";
    if (event.exit.signal != 0) {
      spdlog::warn("rank {} (pid {}) was killed by {}{}", event.globalRank, event.failure.pid,
                   signalName(event.exit.signal), earlier);
    } else {
      spdlog::warn("rank {} (pid {}) exited with code {}{}", event.globalRank, event.failure.pid, event.exit.exitCode,
                   earlier);
    }
    if (replaceInPlace(event, allExited)) return;
    addEarlyExits(victim);
    failures_.push_back(event.failure);
    beginStop(StopReason::kFailure, SIGTERM);
    if (allExited) onAllStopped();
    return;
  }
  if (allExited && replacement_.phase == ReplacementPhase::kClaiming) {
    // The failed rank's replacement was not started yet and every other rank is gone: not a success.
    beginStop(StopReason::kFailure, SIGTERM);
    onAllStopped();
    return;
  }
  if (allExited) {
    spdlog::info("all workers exited 0");
    exitCode_ = 0;
    actions_.endAttempt({AttemptEndReason::kSuccess, {}});
    transition(AgentState::kFinishing);
    actions_.finishNode(NodeEnd::kSucceeded, 0);
    return;
  }
  // An exit 0 while others run: the end of a job, or a rank leaving early whose peers will now fail or hang.
  earlyExits_.push_back(event.failure);
  earlyExits_.back().cause = FailureCause::kEarlyExit;
}

bool AgentPolicy::replaceInPlace(const WorkerExitEvent& event, bool allExited, bool afterHang) {
  if (!replaceRanks_ || restartCount_ >= maxRestarts_) return false;  // out of restarts: the group's rules end it
  std::string why;
  if (allExited) {
    why = "no rank survived";
  } else if (replacement_.phase != ReplacementPhase::kNone && replacement_.phase != ReplacementPhase::kCulpritChosen) {
    why = "it failed while rank " + std::to_string(replacement_.rank.globalRank) + " was being replaced";
  } else if (!earlyExits_.empty()) {
    why = "rank " + std::to_string(earlyExits_.front().globalRank) + " already exited";
  }
  if (!why.empty()) {
    spdlog::warn("restarting the whole worker group instead of replacing rank {}: {}", event.globalRank, why);
    return false;
  }
  replacement_ = {ReplacementPhase::kClaiming, event.failure, afterHang};
  actions_.replaceWorker(event);
  return true;
}

bool AgentPolicy::onReplacementClaimed() {
  if (replacement_.phase != ReplacementPhase::kClaiming || !running()) return false;
  ++restartCount_;
  ++replacementCount_;
  replacement_.phase = ReplacementPhase::kForming;
  if (replacement_.afterHang) failures_.clear();  // the hang is over; its records went with the replacement
  spdlog::warn("rank {} is replaced in place, the other ranks keep running (restart {} of at most {})",
               replacement_.rank.globalRank, restartCount_, maxRestarts_);
  return true;
}

void AgentPolicy::onReplacementRefused(const std::string& why) {
  if (replacement_.phase != ReplacementPhase::kClaiming) return;
  const Replacement refused = replacement_;
  replacement_ = {};
  if (!running()) return;
  spdlog::warn("restarting the whole worker group instead of replacing rank {}: {}", refused.rank.globalRank, why);
  addEarlyExits(refused.afterHang ? waitOnPeers(failures_) : lostAPeer(refused.rank));
  if (refused.afterHang) {
    // The hang's records (failures_) name every hung rank: stopped for the hang as without replacement.
    beginStop(StopReason::kHang, SIGTERM);
    return;
  }
  failures_.push_back(refused.rank);
  beginStop(StopReason::kFailure, SIGTERM);
}

void AgentPolicy::onReplacementFormed() {
  if (replacement_.phase == ReplacementPhase::kForming) replacement_ = {};
}

int AgentPolicy::replacingRank() const {
  const auto phase = replacement_.phase;
  return phase == ReplacementPhase::kNone || phase == ReplacementPhase::kCulpritChosen ? -1
                                                                                       : replacement_.rank.globalRank;
}

void AgentPolicy::onHungCulpritExit(const WorkerExitEvent& event, bool allExited) {
  WorkerExitEvent culprit = event;
  culprit.failure = replacement_.rank;
  culprit.failure.exit = event.exit;
  replacement_ = {};
  spdlog::warn("rank {} (pid {}), which held up the others in the hang, was stopped with {}", event.globalRank,
               event.failure.pid, event.exit.signal != 0 ? signalName(event.exit.signal) : "an exit");
  if (replaceInPlace(culprit, allExited, /*afterHang=*/true)) return;
  // The hang's records (failures_) name every hung rank: stopped for the hang as without replacement.
  addEarlyExits(waitOnPeers(failures_));
  beginStop(StopReason::kHang, SIGTERM);
  if (allExited) onAllStopped();
}

void AgentPolicy::onReplacementFailed(const WorkerFailure& failure) {
  replacement_ = {};
  if (!running()) return;
  failures_.push_back(failure);
  beginStop(StopReason::kFailure, SIGTERM);
}

void AgentPolicy::addEarlyExits(bool theyBrokeSomething) {
  if (theyBrokeSomething) failures_.insert(failures_.end(), earlyExits_.begin(), earlyExits_.end());
  earlyExits_.clear();
}

void AgentPolicy::beginStop(StopReason reason, int signal, int exitSignal) {
  if (replacement_.phase == ReplacementPhase::kClaiming && !replacement_.afterHang) {
    // A failed rank whose replacement was not started: a failure of this attempt like the others.
    failures_.push_back(replacement_.rank);
  }
  if (replacement_.phase == ReplacementPhase::kClaiming) replacement_ = {};
  transition(AgentState::kStopping, reason);
  stopSignal_ = exitSignal != 0 ? exitSignal : signal;
  actions_.stopWorkers(signal);
}

void AgentPolicy::onSignal(int signal, int forwardAs) {
  const int toWorkers = forwardAs != 0 ? forwardAs : signal;
  switch (state_) {
    case AgentState::kStopping:
      if (stopPhase_ == StopPhase::kAwaitingVerdict) {
        // The workers are gone already; only the membership question was open.
        spdlog::warn("received {}; no workers running, stopping", signalName(signal));
        transition(AgentState::kStopping, StopReason::kSignal);
        stopSignal_ = signal;
        concludeStop();
        return;
      }
      if (stopReason_ == StopReason::kSignal) {
        spdlog::warn("second {}: killing the workers now", signalName(signal));
        actions_.killWorkers();
        return;
      }
      spdlog::warn("received {} while stopping; ddprun ends once the workers are gone", signalName(signal));
      transition(AgentState::kStopping, StopReason::kSignal);
      stopSignal_ = signal;
      actions_.stopWorkers(toWorkers);
      return;
    case AgentState::kRunning:
      spdlog::warn("received {}; forwarding {} to the workers", signalName(signal), signalName(toWorkers));
      beginStop(StopReason::kSignal, toWorkers, signal);
      return;
    case AgentState::kCollecting:
      spdlog::warn("received {} while saving the hung ranks' tracebacks; stopping the workers now", signalName(signal));
      leaveCollecting(StopReason::kSignal, toWorkers, signal);
      return;
    case AgentState::kRendezvous:
      spdlog::warn("received {}; no workers running, stopping", signalName(signal));
      stopSignal_ = signal;
      transition(AgentState::kRendezvous, StopReason::kSignal);
      onAllStopped();
      return;
    case AgentState::kFinishing:
      // The workers are gone; what remains is the end-of-job wait (a store host waits for the other nodes).
      spdlog::warn(
          "received {} while ending this node: not waiting for the other nodes any longer (those still "
          "running lose the rendezvous store this node serves); exiting with {}",
          signalName(signal), exitCode_);
      actions_.cutFinishShort();
      return;
    case AgentState::kDone: return;
  }
}

void AgentPolicy::onMembershipChange() {
  if (state_ == AgentState::kStopping && stopReason_ == StopReason::kFailure) {
    // The failure and the node's leaving are one event, seen from two sides.
    spdlog::warn("a node left while the workers stop for a failure: counted as a membership change, not a restart");
    const StopPhase phase = stopPhase_;
    transition(AgentState::kStopping, StopReason::kMembershipChange);
    stopPhase_ = phase;  // the same stop, seen for another reason
    return;
  }
  if (!running()) return;
  spdlog::warn("stopping the workers for a new rendezvous round ({} restart(s) left, not used by this)",
               maxRestarts_ - restartCount_);
  beginStop(StopReason::kMembershipChange, SIGTERM);
}

void AgentPolicy::onBackendLost() {
  if (state_ == AgentState::kFinishing || state_ == AgentState::kDone) return;
  if (running()) {
    beginStop(StopReason::kBackendLost, SIGTERM);
    return;
  }
  if (state_ == AgentState::kCollecting) {
    leaveCollecting(StopReason::kBackendLost, SIGTERM);
    return;
  }
  if (state_ == AgentState::kStopping) {
    const bool awaitingVerdict = stopPhase_ == StopPhase::kAwaitingVerdict;
    transition(AgentState::kStopping, StopReason::kBackendLost);  // whatever the stop was for, nothing can follow it
    if (awaitingVerdict) concludeStop();
    return;
  }
  onFatalError();
}

namespace {

/// The one hung rank the others wait for, when the records name exactly one (and some rank waits for it).
std::optional<WorkerFailure> soleCulprit(const std::vector<WorkerFailure>& hung) {
  std::optional<WorkerFailure> culprit;
  for (const auto& record : hung) {
    if (record.waitsOnPeers) continue;
    if (culprit) return std::nullopt;
    culprit = record;
  }
  if (hung.size() < 2) return std::nullopt;
  return culprit;
}

}  // namespace

void AgentPolicy::onHang(std::vector<WorkerFailure> hung) {
  if (!running()) return;
  if (replaceRanks_ && restartCount_ < maxRestarts_ && earlyExits_.empty() &&
      replacement_.phase == ReplacementPhase::kNone) {
    if (auto culprit = soleCulprit(hung)) replacement_ = {ReplacementPhase::kCulpritChosen, *culprit, true};
  }
  failures_ = std::move(hung);
  addEarlyExits(waitOnPeers(failures_));
  transition(AgentState::kCollecting, StopReason::kHang);
  actions_.saveTracebacks();
}

void AgentPolicy::onTracebacksSaved() {
  if (state_ != AgentState::kCollecting) return;  // stopped meanwhile (a signal)
  const bool culpritChosen = replacement_.phase == ReplacementPhase::kCulpritChosen;
  if (culpritChosen && stopPhase_ != StopPhase::kAllExited) {
    // Only the rank that holds the others up goes; they keep waiting in their collective until it fails.
    spdlog::warn("hang: only rank {} holds the others up; killing it alone to replace it in place",
                 replacement_.rank.globalRank);
    transition(AgentState::kRunning);
    replacement_.phase = ReplacementPhase::kKillingCulprit;
    actions_.killWorker(replacement_.rank.localRank);
    return;
  }
  if (culpritChosen) replacement_ = {};
  leaveCollecting(StopReason::kHang, SIGTERM);
}

void AgentPolicy::leaveCollecting(StopReason reason, int signal, int exitSignal) {
  if (stopPhase_ == StopPhase::kAllExited) {
    // The aborted ranks were the last ones running: the group has stopped already.
    transition(AgentState::kStopping, reason);
    stopSignal_ = exitSignal != 0 ? exitSignal : signal;
    onAllStopped();
    return;
  }
  beginStop(reason, signal, exitSignal);
}

void AgentPolicy::recordAttemptProgress(long long startStep, long long bestStep) {
  attemptSteps_ = std::make_pair(startStep, bestStep);
}

namespace {

/// A signal another process sends (pre-emption, the OOM killer, an operator), as opposed to one a program
/// raises itself (SIGSEGV, SIGABRT, SIGBUS, SIGFPE).
bool fromOutside(int signal) { return signal == SIGKILL || signal == SIGTERM || signal == SIGINT || signal == SIGHUP; }

}  // namespace

std::string AgentPolicy::attemptCause() const {
  std::string cause = toString(stopReason_);
  if (failures_.empty()) return cause;
  const WorkerFailure& root = failures_[rootCauseIndex(failures_)];
  cause += std::string(": ") + toString(root.cause);
  if (root.cause == FailureCause::kExit) cause += " " + std::to_string(root.exit.exitCode);
  if (root.cause == FailureCause::kSignal) cause += " " + signalName(root.exit.signal);
  return cause;
}

void AgentPolicy::countAttemptProgress() {
  if (!attemptSteps_) return;  // nothing reported: a job that never reports is never judged by progress
  const long long best = attemptSteps_->second;
  attemptSteps_.reset();
  const std::string cause = attemptCause();
  if (best > bestStep_) {
    bestStep_ = best;
    attemptsWithoutProgress_ = 0;
    lastCause_ = cause;
    return;
  }
  const bool killedFromOutside = std::any_of(failures_.begin(), failures_.end(), [](const WorkerFailure& f) {
    return (f.cause == FailureCause::kSignal || f.cause == FailureCause::kExit) && fromOutside(f.exit.signal);
  });
  if (killedFromOutside) {
    spdlog::info(
        "attempt ended by an outside signal no further than step {}: not counted as an attempt without "
        "progress",
        bestStep_);
    return;
  }
  // A run of attempts that end where an earlier one got, for one cause, is a bug that restarting does not fix; a
  // different cause starts a new run.
  attemptsWithoutProgress_ = cause == lastCause_ ? attemptsWithoutProgress_ + 1 : 1;
  lastCause_ = cause;
}

void AgentPolicy::onMembershipVerdict(MembershipVerdict verdict) {
  if (stopPhase_ != StopPhase::kAwaitingVerdict) return;  // a signal or a lost backend decided meanwhile
  stopPhase_ = StopPhase::kWaiting;
  if (verdict != MembershipVerdict::kUnchanged && stopReason_ == StopReason::kFailure) {
    spdlog::warn("the worker failure came with {}: counted as a membership change, not a restart",
                 verdict == MembershipVerdict::kRoundChanged
                     ? "a change of the rendezvous round (a node left, or nodes wait to join)"
                     : "the rendezvous store not answering (its host likely died with its workers; the next round "
                       "waits for it to come back, up to the liveness expiry)");
    transition(AgentState::kStopping, StopReason::kMembershipChange);
  }
  concludeStop();
}

void AgentPolicy::onAllStopped() {
  if (multiNode_ && stopReason_ == StopReason::kFailure) {
    // Was it a node's death, seen first by the workers' collectives? Ask before counting it.
    stopPhase_ = StopPhase::kAwaitingVerdict;
    actions_.confirmMembership();
    return;
  }
  concludeStop();
}

void AgentPolicy::concludeStop() {
  const StopReason reason = stopReason_;
  if (state_ != AgentState::kRendezvous) actions_.endAttempt({endReasonOf(reason), failures_});
  switch (reason) {
    case StopReason::kSignal:
      spdlog::info("workers stopped; exiting on {}", signalName(stopSignal_));
      exitCode_ = 128 + stopSignal_;
      transition(AgentState::kFinishing);
      actions_.finishNode(NodeEnd::kStopped, exitCode_);
      return;
    case StopReason::kBackendLost:
      exitCode_ = 1;
      transition(AgentState::kFinishing);
      actions_.finishNode(NodeEnd::kAbandoned, 1);
      return;
    case StopReason::kMembershipChange:
      // As in torchelastic, a membership change does not use up a restart.
      spdlog::info("workers stopped for the membership change; starting a new rendezvous round");
      transition(AgentState::kRendezvous);
      actions_.beginRendezvous();
      return;
    case StopReason::kFailure:
    case StopReason::kHang:
    case StopReason::kNone: restartOrGiveUp(); return;
  }
}

void AgentPolicy::restartOrGiveUp() {
  countAttemptProgress();
  const bool noProgress = maxNoProgressAttempts_ > 0 && attemptsWithoutProgress_ >= maxNoProgressAttempts_;
  if (restartCount_ < maxRestarts_ && !noProgress) {
    ++restartCount_;
    spdlog::warn("worker group failed; restart {} of at most {} (attempt {})", restartCount_, maxRestarts_,
                 restartCount_);
    // Every restart of a multi-node job is a new round (torchelastic's _restart_workers).
    transition(AgentState::kRendezvous);
    if (multiNode_) {
      actions_.beginRendezvous();
    } else {
      onRoundComplete();
    }
    return;
  }
  if (!failures_.empty()) actions_.reportFailures(failures_);
  if (noProgress) {
    spdlog::error(
        "giving up: {} attempt(s) in a row ended no further than step {} (the best of the attempts before), each "
        "for the same cause ({}); restarting again would not help (exit code {})",
        attemptsWithoutProgress_, bestStep_, lastCause_, kNoProgressExitCode);
    exitCode_ = kNoProgressExitCode;
  } else {
    exitCode_ = 1;
  }
  transition(AgentState::kFinishing);
  actions_.finishNode(NodeEnd::kFailed, exitCode_);
}

void AgentPolicy::onFinished() { transition(AgentState::kDone); }

}  // namespace ddprun::launcher
