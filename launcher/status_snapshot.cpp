#include "launcher/status_snapshot.hpp"

#include <algorithm>
#include <chrono>

#include "launcher/config/local_host.hpp"

namespace ddprun::launcher {
namespace {

/// A rank's state for the page: from its exit, the hang verdict, or "running".
std::string rankState(const std::optional<WorkerExit>& exit, bool hung, bool stoppedByUs, bool reaped) {
  if (!exit && reaped) return "exited";  // gone; its exit reaches the policy once its last output is read
  if (!exit) return hung ? "hung" : "running";
  if (exit->succeeded()) return "exited";
  return stoppedByUs ? "stopped" : "failed";
}

}  // namespace

void markCulpritsOfAHang(status::AgentSnapshot& s) {
  if (s.attempts.empty() || !s.attempts.back().endUnixMs || s.attempts.back().reason != "hang") return;
  const auto& culprits = s.attempts.back().culprits;
  if (culprits.empty()) return;
  for (auto& rank : s.ranks) {
    const bool named = std::any_of(culprits.begin(), culprits.end(),
                                   [&](const status::Culprit& c) { return c.rank == rank.globalRank; });
    if (rank.hung && !named) {
      rank.hung = false;
      if (rank.state == "hung") rank.state = "stopped";
    }
  }
}

status::AgentSnapshot takeSnapshot(const SnapshotSources& from) {
  const LaunchPlan& config = from.config;
  const AgentPolicy& policy = from.policy;
  const WorkerWatch& watch = from.watch;
  const WorkerGroup& group = from.group;
  const auto& round = from.rounds.formed();
  status::AgentSnapshot s;
  s.runId = config.rdzvId;
  s.node = hostName();
  s.role = config.role;
  if (round) {
    s.groupRank = round->groupRank;
    s.nodes = round->groupWorldSize;
    s.round = static_cast<int>(round->round);
    s.worldSize = round->worldSize;
  } else {
    s.worldSize = config.nproc;
  }
  from.history.fill(s);
  s.restartsUsed = policy.restartCount();
  s.maxRestarts = config.maxRestarts;
  s.state = toString(policy.state());
  // The end as Prometheus and the page tell it apart: a job that ended with a non-zero exit code failed.
  if (policy.state() == AgentState::kDone && s.ended && s.ended->exitCode != 0) s.state = "failed";
  if (policy.state() == AgentState::kStopping || policy.state() == AgentState::kCollecting) {
    s.stopReason = toString(policy.stopReason());
  }
  s.snapshotUnixMs = SystemClock::instance().wallMs();
  s.hangTimeoutSeconds = watch.hangTimeoutSeconds();
  for (size_t local = 0; local < group.size(); ++local) {
    status::RankSnapshot rank;
    rank.localRank = static_cast<int>(local);
    rank.globalRank = group.globalRank(local);
    rank.pid = group.pid(local);
    const RankProgress progress = watch.progress(local);
    const auto& exit = group.exit(local);
    rank.state = rankState(exit, progress.hung, group.stoppedByUs(local), group.reaped(local));
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
    rank.outputHeld = group.outputHeld(local);
    rank.suspected = progress.suspected;
    s.ranks.push_back(std::move(rank));
  }
  if (const auto* store = from.rounds.server()) {
    status::StoreStats stats;
    stats.connections = store->connectionCount();
    stats.keys = static_cast<uint64_t>(store->keyCount());
    stats.operations = store->requestsServed();
    s.store = stats;
  }
  if (!s.attempts.empty() && !s.attempts.back().endUnixMs) s.attempts.back().bestStep = watch.bestStep();
  markCulpritsOfAHang(s);
  s.counters.hangsDetected = watch.counters().hangs;
  s.counters.stragglersFlagged = watch.counters().stragglers;
  s.counters.spinsReported = watch.counters().spins;
  return s;
}

}  // namespace ddprun::launcher
