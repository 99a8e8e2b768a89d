#pragma once
// The elastic agent of one node, wired together: the policy (agent_policy.hpp) decides; this class turns the
// world into the policy's events (worker exits through SIGCHLD, ddprun's own signals, rendezvous rounds,
// the monitor tick) and carries out its actions with the worker group, the round's store, the rendezvous
// session and the log directory. Everything but the rendezvous' blocking calls runs on one Asio loop.
#include <boost/asio.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launcher/agent_policy.hpp"
#include "launcher/config/launch_plan.hpp"
#include "launcher/log_layout.hpp"
#include "launcher/process/fork_template.hpp"
#include "launcher/process/numa_binding.hpp"
#include "launcher/process/orphan_guard.hpp"
#include "launcher/process/process_spawn.hpp"
#include "launcher/process/sender_signals.hpp"
#include "launcher/process/spare_rank.hpp"
#include "launcher/rendezvous_session.hpp"
#include "launcher/round_store.hpp"
#include "launcher/status/status_server.hpp"
#include "launcher/ticker.hpp"
#include "launcher/watch/run_history.hpp"
#include "launcher/watch/stack_collector.hpp"
#include "launcher/watch/worker_watch.hpp"
#include "launcher/worker_env.hpp"
#include "launcher/worker_group.hpp"
#include "launcher/workers_store.hpp"

namespace ddprun::launcher {

class Agent : private AgentActions {
 public:
  /// Carries out `plan` (resolveLaunchPlan). `guard` (forked while ddprun was still single-threaded) must
  /// outlive the agent.
  Agent(LaunchPlan plan, OrphanGuard& guard);
  ~Agent() override;
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  /// Runs the job; returns ddprun's exit code: 0 when every worker of an attempt exited 0, 1 when the
  /// group failed with no restarts left (after printing the failure summary) or the rendezvous failed
  /// (timeout, closed, backend lost), 93 when restarts made no progress, 128+N when ddprun was stopped by
  /// signal N (after forwarding it to the workers and waiting up to --stop-timeout).
  /// Throws ddprun::Error when the store cannot bind or a worker cannot be started.
  int run();

 private:
  // AgentActions: what the policy asks for.
  void beginRendezvous() override;
  void startWorkers() override;
  void stopWorkers(int signal) override;
  void killWorkers() override;
  void killWorker(int localRank) override;
  void saveTracebacks() override;
  void endAttempt(const AttemptEnd& end) override;
  void reportFailures(const std::vector<WorkerFailure>& failures) override;
  void finishNode(NodeEnd end, int exitCode) override;
  void cutFinishShort() override;
  void confirmMembership() override;
  std::string replaceWorker(const WorkerExitEvent& event) override;  // agent_replacement.cpp

  /// Starts the workers of `round` (throws ddprun::Error).
  void startAttempt(const rendezvous::RoundAssignment& round);
  std::vector<WorkerGroup::Member> membersFor(const rendezvous::RoundAssignment& round, int attempt) const;
  /// --numa-binding: each local rank's CPUs and memory node (empty without the flag).
  std::vector<NumaBinding> numaPlan() const;
  /// Ranks and store of a one-node job (no rendezvous traffic).
  rendezvous::RoundAssignment singleNodeRound() const;
  void onWorkerExit(const WorkerExitEvent& event, bool allExited);
  /// Removes the run's shared-memory segments left in /dev/shm (one attempt's, or all).
  void removeLeftoverSegments(std::optional<int> attempt);
  /// Starts the status page (--status-port); throws ConfigError when it cannot listen.
  void startStatusPage();
  /// --start-method forkserver: starts the program as a template when it supports it; `then` runs once the
  /// template is ready or has failed (ranks then start the normal way), at once when it is not used.
  void startForkServerThen(std::function<void()> then);
  /// What the status page shows, copied now (agent_status.cpp).
  status::AgentSnapshot snapshot() const;
  /// From the rendezvous thread: the round could not be formed; ddprun ends with exit code 1.
  void failRendezvous(const std::string& message);
  /// The monitor tick's membership task (multi-node).
  void checkMembership();
  void waitForSignals();
  /// One signal of either set: a listed stop signal stops the job, another listed one is forwarded to the
  /// workers (unless Slurm sent it to all of them already), an unlisted one stops the job with SIGTERM.
  void onSignal(int signal, pid_t sender);
  /// Ctrl-Z and fg/bg: SIGTSTP stops the workers and ddprun, SIGCONT resumes them; SIGWINCH resizes their
  /// pseudo-terminals.
  void waitForJobControl();
  void suspend();
  /// --restart-scope rank (agent_replacement.cpp): whether this job can replace ranks (the program supports it,
  /// ddprun serves the workers' store); says in one line why not when it was asked for and cannot.
  bool rankReplacementUsable() const;
  /// The round's workers' store, as this agent reaches it (its own, or another node's); made at first use in an
  /// attempt. Throws store errors when another node's does not answer.
  WorkersStore& workersStore();
  /// Starts the replacement of `local` in generation `generation` (posted: not from inside an exit handler).
  void startReplacement(int local, int generation);
  /// Looks every 5 ms, in ddprun's own store, for the mark that `generation` formed; tells the policy.
  void watchGenerationFormed(int generation);
  /// --restart-scope rank with the forkserver: forks a spare rank (launcher/process/spare_rank.hpp) after `delay`,
  /// unless one waits already.
  void prepareSpareAfter(std::chrono::milliseconds delay);
  /// Stops the loop; run() returns the policy's exit code.
  void finish();
  /// After the loop: the workers' last output, the report files, a last look for open status pages.
  void wrapUp();

  const LaunchPlan config_;                       ///< what was asked for, resolved
  WorkerSpec spec_;                               ///< what every worker runs, and the job-wide part of its environment
  OrphanGuard& guard_;                            ///< kills every worker's group if ddprun dies
  boost::asio::io_context io_;                    ///< the agent's one loop
  ChildReaper reaper_;                            ///< worker exits, through SIGCHLD
  boost::asio::signal_set signals_;               ///< the stop signals: SIGINT, SIGTERM, SIGHUP, SIGQUIT
  SenderAwareSignals warnings_;                   ///< SIGUSR1/2 and other listed signals, with their sender
  boost::asio::signal_set jobControl_;            ///< SIGTSTP, SIGCONT, SIGWINCH
  Ticker ticker_;                                 ///< every --monitor-interval
  RoundStore roundStore_;                         ///< the workers' store of each round
  std::unique_ptr<RunLogDir> logDir_;             ///< <log dir>/<run id>_<random>
  std::unique_ptr<RendezvousSession> session_;    ///< multi-node only
  WorkerGroup group_;                             ///< the current attempt's workers
  MachineEvidence evidence_;                      ///< /proc and stack tools, for the watch
  WorkerWatch watch_;                             ///< progress, hangs, stragglers, stacks
  AgentPolicy policy_;                            ///< the decisions
  std::unique_ptr<RunHistory> history_;           ///< attempts, failures, the end; the report
  std::unique_ptr<status::StatusServer> status_;  ///< --status-port
  std::unique_ptr<ForkTemplate> forkServer_;      ///< --start-method forkserver, when the program supports it
  std::unique_ptr<SpareRank> spare_;  ///< --restart-scope rank with the forkserver, when the program supports it
  boost::asio::steady_timer spareTimer_{io_};          ///< prepareSpareAfter's delay
  std::optional<rendezvous::RoundAssignment> round_;   ///< the round the next or current attempt runs in
  bool suspended_ = false;                             ///< stopped on SIGTSTP; the next SIGCONT continues the workers
  bool checkInFlight_ = false;                         ///< a membership check is on the rendezvous thread
  std::chrono::steady_clock::time_point failureSeen_;  ///< what ended the last attempt was seen (restart latency)
  std::string firstSign_;   ///< what failureSeen_ saw: "failure", "hang" or "membership change"
  int attempt_ = 0;         ///< the running attempt (TORCHELASTIC_RESTART_COUNT of its workers)
  int commGeneration_ = 0;  ///< the workers' communicator generation in this attempt (rank replacements)
  boost::asio::steady_timer formedTimer_{io_};  ///< watchGenerationFormed's pace
  std::unique_ptr<WorkersStore> workersStore_;  ///< the attempt's workers' store, for replacements
  std::string replacingAs_;                     ///< what this agent wrote into the replacement lock
  std::string rendezvousId_;                    ///< this node in the replacement lock: address and pid
};

}  // namespace ddprun::launcher
