#pragma once
// The elastic agent of one node: rendezvous with the other nodes (if any), serve the workers' store, start
// the worker group, watch it, restart the whole group on a failure while restarts remain, and start a new
// round when the membership changes, without using up a restart (PyTorch's SimpleElasticAgent._invoke_run,
// torch/distributed/elastic/agent/server/api.py). Everything but the rendezvous' blocking calls runs on
// one Asio loop: worker exits (SIGCHLD), worker output, ddprun's own signals, the store, the timers.
#include <boost/asio.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launcher/failure_summary.hpp"
#include "launcher/launch_config.hpp"
#include "launcher/orphan_guard.hpp"
#include "launcher/rendezvous_session.hpp"
#include "launcher/worker_env.hpp"
#include "launcher/worker_process.hpp"
#include "store/store_server.hpp"

namespace ddprun::launcher {

class Agent {
 public:
  /// `config` must be validated (parseLaunchArgs) with nproc resolved.
  explicit Agent(LaunchConfig config);
  ~Agent();

  /// Runs the job; returns ddprun's exit code: 0 when every worker of an attempt exited 0, 1 when the
  /// group failed with no restarts left (after printing the failure summary) or the rendezvous failed
  /// (timeout, closed, backend lost), 128+N when ddprun was stopped by signal N (after forwarding it to
  /// the workers and waiting up to --stop-timeout).
  /// Throws ddprun::Error when the store cannot bind or a worker cannot be started.
  int run();

 private:
  enum class StopReason { kNone, kFailure, kSignal, kMembershipChange, kBackendLost };
  enum class Phase { kRendezvous, kRunning, kFinishing };
  struct Slot {
    WorkerAssignment assignment;
    std::string errorFile;
    std::unique_ptr<WorkerProcess> process;
    std::optional<WorkerExit> exit;
  };

  void startStore();
  /// A fresh store for this node's workers for the next round; returns its port.
  int prepareRoundStore();
  void beginRendezvous();
  void onRoundComplete(const rendezvous::RoundAssignment& round);
  /// Called from the rendezvous thread: the round could not be formed; ddprun ends with exit code 1.
  void failRendezvous(const std::string& message);
  void scheduleMonitor();
  void onMembership(rendezvous::Membership membership);
  /// Ends this node: tells the rendezvous (multi-node), then finish(exitCode).
  void finishNode(rendezvous::NodeOutcome outcome, int exitCode);
  void startAttempt(const rendezvous::RoundAssignment& round);
  /// Ranks and store of a one-node job (no rendezvous traffic).
  rendezvous::RoundAssignment singleNodeRound() const;
  void onWorkerExit(size_t localRank, const WorkerExit& exit);
  void beginStop(StopReason reason, int signal);
  void onAllStopped();
  void waitForSignals();
  void finish(int exitCode);
  std::string attemptDir() const;
  bool allExited() const;

  LaunchConfig config_;
  std::unique_ptr<OrphanGuard> guard_;  // first in, last out: outlives every worker handle
  boost::asio::io_context io_;
  boost::asio::signal_set signals_;
  boost::asio::steady_timer killTimer_;
  std::unique_ptr<store::StoreServer> store_;
  std::vector<std::unique_ptr<store::StoreServer>> retiredStores_;  // stopped; freed with the agent
  std::unique_ptr<RendezvousSession> session_;  // multi-node only
  boost::asio::steady_timer monitorTimer_;
  Phase phase_ = Phase::kRendezvous;
  bool checkInFlight_ = false;
  std::string masterAddr_;
  int masterPort_ = 0;
  std::string logRoot_;
  bool inheritedOmpThreads_ = false;
  std::vector<Slot> slots_;
  int restartCount_ = 0;
  StopReason stopReason_ = StopReason::kNone;
  int stopSignal_ = 0;
  std::vector<WorkerFailure> failures_;
  std::chrono::steady_clock::time_point failureSeen_;
  int exitCode_ = 0;
  bool finished_ = false;  // finish() ran: late handlers (exits, rounds, checks) must not start anything
};

}  // namespace ddprun::launcher
