#pragma once
// Rank replacement (--restart-scope rank), carried out for the policy: the announcement in the workers' store, the
// new process in the failed rank's place (a waiting spare when there is one), and the wait for the new communicator
// generation to form. Its store calls run on a StoreLane, never on the agent's loop, and the wait for "formed" is a
// store WAIT. The rules (when to replace, when to restart the group instead): AgentPolicy.
#include <atomic>
#include <boost/asio.hpp>
#include <memory>
#include <string>

#include "launcher/agent_policy.hpp"
#include "launcher/attempt_plan.hpp"
#include "launcher/history/run_history.hpp"
#include "launcher/process/start_methods.hpp"
#include "launcher/replacement/store_lane.hpp"
#include "launcher/watch/worker_watch.hpp"
#include "launcher/worker_group.hpp"
#include "store/store_server.hpp"

namespace ddprun::launcher {

class ReplacementCoordinator {
 public:
  /// The agent's parts it acts on; they must outlive it.
  struct Parts {
    AgentPolicy& policy;
    WorkerGroup& group;
    WorkerWatch& watch;
    RunHistory& history;
    const AttemptPlan& plan;
    StartMethods& starts;
  };
  /// `holder`: this node in the job-wide replacement lock (address and pid). `agentStore`: an agent serves the
  /// workers' store (not --no-agent-store). `connect` (tests): how the lane reaches the workers' store; by default a
  /// TCP client to the round's MASTER_ADDR:MASTER_PORT with 2 s per operation.
  ReplacementCoordinator(boost::asio::io_context& io, Parts parts, std::string holder, bool agentStore,
                         StoreLane::Connect connect = {});

  /// Whether the job can replace ranks: asked for, the program supports it (its ELF section) and ddprun serves the
  /// workers' store; says in one line why not when it was asked for and cannot.
  static bool usable(const LaunchPlan& config, const WorkerSpec& spec);

  /// A new attempt `attempt` in `round`; `served`: this agent's own store when it serves the round's (null: another
  /// node's, reached over TCP).
  void startAttempt(const rendezvous::RoundAssignment& round, int attempt, store::StoreServer* served);
  /// The policy's replaceWorker: claims the lock and announces the next generation off the loop, then answers the
  /// policy (onReplacementClaimed / onReplacementRefused) and starts the replacement.
  void replace(const WorkerExitEvent& event);
  /// Sets `key` at the root of the workers' store (the watch's dump request): at once in this agent's own store, else
  /// off the loop. False when the workers' store is rank 0's own (--no-agent-store): nothing to write into.
  bool setKey(const std::string& key, const std::string& value);

 private:
  /// The claim's answer, on the loop.
  void claimed(const WorkerExitEvent& event, int generation, const std::string& refusal);
  void start(int local, int generation);
  void awaitFormed(int generation);
  StoreLane& lane();

  boost::asio::io_context& io_;
  Parts parts_;
  std::string holder_;
  bool agentStore_;
  StoreLane::Connect connect_;
  StoreLane::Connect attemptConnect_;  ///< how the lane reaches the current attempt's workers' store
  std::unique_ptr<StoreLane> lane_;    ///< made at first use: a job that never replaces costs no thread
  std::string holding_;                ///< what this agent wrote into the replacement lock
  rendezvous::RoundAssignment round_;
  int attempt_ = 0;
  store::StoreServer* served_ = nullptr;
  /// The generation being formed (0: none); read on the lane's thread to end an outdated wait.
  std::shared_ptr<std::atomic<int>> generation_ = std::make_shared<std::atomic<int>>(0);
};

}  // namespace ddprun::launcher
