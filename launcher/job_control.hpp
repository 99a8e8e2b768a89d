#pragma once
// ddprun's own signals, turned into the policy's events and the workers' job control: a stop signal (SIGINT,
// SIGTERM, SIGHUP, SIGQUIT) stops the job, Slurm's warnings and other --signals-to-handle signals are forwarded to
// the workers (with their sender read, so one Slurm already sent to every process is not sent twice), and Ctrl-Z,
// fg/bg and window resizes reach the workers as they reach a shell's job.
#include <boost/asio.hpp>
#include <vector>

#include "launcher/agent_policy.hpp"
#include "launcher/process/sender_signals.hpp"
#include "launcher/watch/worker_watch.hpp"
#include "launcher/worker_group.hpp"

namespace ddprun::launcher {

class JobControl {
 public:
  /// `listed`: --signals-to-handle. The parts must outlive this object.
  JobControl(boost::asio::io_context& io, const std::vector<int>& listed, AgentPolicy& policy, WorkerGroup& group,
             WorkerWatch& watch);

  /// Starts listening (on the loop).
  void start();
  /// Stops listening (the agent is done).
  void cancel();
  /// After the loop: sets `*signalled` when a stop signal arrives while ddprun waits for its console's reader.
  void noteStopSignal(bool* signalled);

 private:
  void waitForStopSignals();
  /// One signal of either set: a listed stop signal stops the job, another listed one is forwarded to the workers
  /// (unless Slurm sent it to all of them already), an unlisted one stops the job with SIGTERM.
  void onSignal(int signal, pid_t sender);
  /// SIGTSTP stops the workers and ddprun, SIGCONT resumes them; SIGWINCH resizes their pseudo-terminals.
  void waitForJobControl();
  void suspend();

  std::vector<int> listed_;
  AgentPolicy& policy_;
  WorkerGroup& group_;
  WorkerWatch& watch_;
  boost::asio::signal_set stopSignals_;  ///< SIGINT, SIGTERM, SIGHUP, SIGQUIT
  SenderAwareSignals warnings_;          ///< SIGUSR1/2 and other listed signals, with their sender
  boost::asio::signal_set jobControl_;   ///< SIGTSTP, SIGCONT, SIGWINCH
  bool suspended_ = false;               ///< stopped on SIGTSTP; the next SIGCONT continues the workers
};

}  // namespace ddprun::launcher
