// The agent's status snapshot: what the status page, /status.json and /metrics show, copied on the agent's
// loop once per request. Kept apart from agent.cpp, which makes the decisions' wiring.
#include <chrono>

#include "launcher/agent.hpp"
#include "launcher/config/local_host.hpp"

namespace ddprun::launcher {
namespace {

/// A rank's state for the page: from its exit, the hang verdict, or "running".
std::string rankState(const std::optional<WorkerExit>& exit, bool hung, bool stoppedByUs) {
  if (!exit) return hung ? "hung" : "running";
  if (exit->succeeded()) return "exited";
  return stoppedByUs ? "stopped" : "failed";
}

}  // namespace

status::AgentSnapshot Agent::snapshot() const {
  status::AgentSnapshot s;
  s.runId = config_.rdzvId;
  s.node = hostName();
  s.role = config_.role;
  if (round_) {
    s.groupRank = round_->groupRank;
    s.nodes = round_->groupWorldSize;
    s.round = static_cast<int>(round_->round);
    s.worldSize = round_->worldSize;
  } else {
    s.worldSize = config_.nproc;
  }
  if (history_) history_->fill(s);
  s.restartsUsed = policy_.restartCount();
  s.maxRestarts = config_.maxRestarts;
  s.state = toString(policy_.state());
  if (policy_.state() == AgentState::kStopping || policy_.state() == AgentState::kCollecting) {
    s.stopReason = toString(policy_.stopReason());
  }
  s.snapshotUnixMs = SystemClock::instance().wallMs();
  s.hangTimeoutSeconds = watch_.hangTimeoutSeconds();
  for (size_t local = 0; local < group_.size(); ++local) {
    status::RankSnapshot rank;
    rank.localRank = static_cast<int>(local);
    rank.globalRank = group_.globalRank(local);
    rank.pid = group_.pid(local);
    const RankProgress progress = watch_.progress(local);
    const auto& exit = group_.exit(local);
    rank.state = rankState(exit, progress.hung, group_.stoppedByUs(local));
    rank.step = progress.step;
    rank.phase = progress.phase;
    rank.stepsPerSecond = progress.stepsPerSecond;
    rank.samplesPerSecond = progress.samplesPerSecond;
    rank.stepsTotal = progress.stepsTotal;
    rank.scalars = progress.scalars;
    rank.stepRateHistory = progress.rateHistory;
    rank.progressAgeSeconds = progress.progressAgeSeconds;
    rank.outputAgeSeconds = progress.outputAgeSeconds;
    if (exit && exit->signal != 0) rank.signal = exit->signal;
    if (exit && exit->signal == 0) rank.exitCode = exit->exitCode;
    rank.hung = progress.hung;
    rank.straggler = progress.straggler;
    rank.outputHeld = group_.outputHeld(local);
    s.ranks.push_back(std::move(rank));
  }
  if (const auto* store = roundStore_.server()) {
    status::StoreStats stats;
    stats.connections = store->connectionCount();
    stats.keys = static_cast<uint64_t>(store->keyCount());
    stats.operations = store->requestsServed();
    s.store = stats;
  }
  if (!s.attempts.empty() && !s.attempts.back().endUnixMs) s.attempts.back().bestStep = watch_.bestStep();
  s.counters.hangsDetected = watch_.hangsDetected();
  s.counters.stragglersFlagged = watch_.stragglersFlagged();
  return s;
}

}  // namespace ddprun::launcher
