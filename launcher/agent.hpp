#pragma once
// The single-node elastic agent: hosts the store, starts the worker group, watches it, and restarts the
// whole group on a failure while restarts remain (PyTorch's SimpleElasticAgent._invoke_run,
// torch/distributed/elastic/agent/server/api.py). Everything runs on one Asio loop: worker exits
// (SIGCHLD), worker output, ddprun's own signals, the store, and the stop timers.
#include <boost/asio.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launcher/failure_summary.hpp"
#include "launcher/launch_config.hpp"
#include "launcher/orphan_guard.hpp"
#include "launcher/worker_env.hpp"
#include "launcher/worker_process.hpp"
#include "rendezvous/store_server.hpp"

namespace ddprun::launcher {

class Agent {
 public:
  /// `config` must be validated (parseLaunchArgs) with nproc resolved.
  explicit Agent(LaunchConfig config);
  ~Agent();

  /// Runs the job; returns ddprun's exit code: 0 when every worker of an attempt exited 0, 1 when the
  /// group failed with no restarts left (after printing the failure summary), 128+N when ddprun was
  /// stopped by signal N (after forwarding it to the workers and waiting up to --stop-timeout).
  /// Throws ddprun::Error when the store cannot bind or a worker cannot be started.
  int run();

 private:
  enum class StopReason { kNone, kFailure, kSignal };
  struct Slot {
    WorkerAssignment assignment;
    std::string errorFile;
    std::unique_ptr<WorkerProcess> process;
    std::optional<WorkerExit> exit;
  };

  void startStore();
  void startAttempt();
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
  std::unique_ptr<rendezvous::StoreServer> store_;
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
};

}  // namespace ddprun::launcher
