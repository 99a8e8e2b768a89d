#pragma once
// One worker's exit as the agent sees it: what WorkerGroup reports and AgentPolicy decides on. Apart from both, so
// the mechanism (the group) does not include the decisions' header.
#include "launcher/history/failure_summary.hpp"
#include "launcher/process/worker_exit.hpp"

namespace ddprun::launcher {

/// One worker's exit as the agent saw it.
struct WorkerExitEvent {
  int localRank = 0;
  int globalRank = 0;
  WorkerExit exit;
  /// Ended by ddprun's own stop signal (not dead before it, no error file written before it).
  bool stoppedByUs = false;
  /// Filled when the worker did not succeed: what the failure summary says about it.
  WorkerFailure failure;
};

}  // namespace ddprun::launcher
