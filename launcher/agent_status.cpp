// The agent's status snapshot: what the status page, /status.json and /metrics show, copied on the agent's
// loop once per request. Kept apart from agent.cpp, which makes the decisions' wiring.
#include <chrono>

#include "launcher/agent.hpp"
#include "launcher/local_host.hpp"

namespace ddprun::launcher {
namespace {

int64_t nowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

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
  s.attempt = attempts_ && !attempts_->records().empty() ? attempts_->records().back().attempt : 0;
  s.restartsUsed = policy_.restartCount();
  s.maxRestarts = config_.maxRestarts;
  s.state = toString(policy_.state());
  if (policy_.state() == AgentState::kStopping) s.stopReason = toString(policy_.stopReason());
  s.startUnixMs = startUnixMs_;
  s.snapshotUnixMs = nowUnixMs();
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
    rank.stepRateHistory = progress.rateHistory;
    rank.progressAgeSeconds = progress.progressAgeSeconds;
    rank.outputAgeSeconds = progress.outputAgeSeconds;
    if (exit && exit->signal != 0) rank.signal = exit->signal;
    if (exit && exit->signal == 0) rank.exitCode = exit->exitCode;
    rank.hung = progress.hung;
    rank.straggler = progress.straggler;
    s.ranks.push_back(std::move(rank));
  }
  if (const auto* store = roundStore_.server()) {
    status::StoreStats stats;
    stats.connections = store->connectionCount();
    stats.keys = static_cast<uint64_t>(store->keyCount());
    stats.operations = store->requestsServed();
    s.store = stats;
  }
  if (attempts_) s.attempts = attempts_->records();
  if (!s.attempts.empty() && !s.attempts.back().endUnixMs) s.attempts.back().bestStep = watch_.bestStep();
  s.lastFailure = lastFailure_;
  s.counters.hangsDetected = watch_.hangsDetected();
  s.counters.stragglersFlagged = watch_.stragglersFlagged();
  s.counters.restarts = s.attempts.empty() ? 0 : s.attempts.size() - 1;
  return s;
}

}  // namespace ddprun::launcher
