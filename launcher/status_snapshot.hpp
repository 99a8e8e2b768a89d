#pragma once
// What the status page, /status.json and /metrics show, copied from the agent's parts on its loop once per request.
#include "launcher/agent_policy.hpp"
#include "launcher/config/launch_plan.hpp"
#include "launcher/history/run_history.hpp"
#include "launcher/node_rounds.hpp"
#include "launcher/status/agent_snapshot.hpp"
#include "launcher/watch/worker_watch.hpp"
#include "launcher/worker_group.hpp"

namespace ddprun::launcher {

/// The parts a snapshot reads.
struct SnapshotSources {
  const LaunchPlan& config;
  const NodeRounds& rounds;
  const RunHistory& history;
  const AgentPolicy& policy;
  const WorkerWatch& watch;
  const WorkerGroup& group;
};

/// Once a hang's attempt has ended, only the ranks its record names (those that held the others up) stay marked hung;
/// the ranks that only waited for them in a collective show as stopped.
void markCulpritsOfAHang(status::AgentSnapshot& snapshot);

/// The agent's state now. Call on the agent's loop.
status::AgentSnapshot takeSnapshot(const SnapshotSources& from);

}  // namespace ddprun::launcher
