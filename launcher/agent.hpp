#pragma once
// The elastic agent of one node: the composition root. It owns the parts, wires them together and relays the
// policy's actions to them, and nothing else (torch's SimpleElasticAgent / LocalElasticAgent split; Asio's server
// owning an acceptor, a manager and a handler). Who decides: AgentPolicy. Who does: NodeRounds (rendezvous, the
// round's store), AttemptPlan (what each rank runs), WorkerGroup (processes), WorkerWatch (progress, hangs),
// ReplacementCoordinator (rank replacement), StartMethods (forkserver, spare rank), JobControl (ddprun's signals),
// RunHistory (the record). Everything runs on one Asio loop that never waits: docs/architecture.md.
#include <boost/asio.hpp>
#include <memory>
#include <string>
#include <vector>

#include "launcher/agent_policy.hpp"
#include "launcher/attempt_plan.hpp"
#include "launcher/config/launch_plan.hpp"
#include "launcher/history/run_history.hpp"
#include "launcher/job_control.hpp"
#include "launcher/log_layout.hpp"
#include "launcher/node_rounds.hpp"
#include "launcher/process/orphan_guard.hpp"
#include "launcher/process/start_methods.hpp"
#include "launcher/replacement/replacement_coordinator.hpp"
#include "launcher/status/status_server.hpp"
#include "launcher/status_snapshot.hpp"
#include "launcher/ticker.hpp"
#include "launcher/watch/evidence/machine_evidence.hpp"
#include "launcher/watch/evidence_trace.hpp"
#include "launcher/watch/worker_watch.hpp"
#include "launcher/worker_group.hpp"

namespace ddprun::launcher {

class Agent : private AgentActions {
 public:
  /// Carries out `plan` (resolveLaunchPlan). `guard` (forked while ddprun was still single-threaded) must
  /// outlive the agent. Throws ConfigError when the run's log directory or --numa-binding cannot be set up.
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
  void replaceWorker(const WorkerExitEvent& event) override;

  // Named handlers: the parts' events, relayed to the policy.
  void onWorkerExit(const WorkerExitEvent& event, bool allExited);
  void onHangVerdict(std::vector<WorkerFailure> hung);
  bool setWorkersStoreKey(const std::string& key, const std::string& value);
  void onRendezvousFailed(const std::string& message);
  void onMembershipTick();

  /// Starts the workers of the current round (throws ddprun::Error).
  void startAttempt();
  /// Completes the records of `failures` (stacks, exits, hints) and formats their summary.
  std::vector<WorkerFailure> completeRecords(const std::vector<WorkerFailure>& failures, std::string* summary) const;
  /// Starts the status page (--status-port); throws ConfigError when it cannot listen.
  void startStatusPage();
  SnapshotSources snapshotSources() const;
  /// Stops the loop; run() returns the policy's exit code.
  void finish();
  /// After the loop: the workers' last output, the report files, a last look for open status pages.
  void wrapUp();

  const LaunchPlan config_;                       ///< what was asked for, resolved
  boost::asio::io_context io_;                    ///< the agent's one loop
  ChildReaper reaper_;                            ///< worker exits, through SIGCHLD
  Ticker ticker_;                                 ///< every --monitor-interval
  std::unique_ptr<RunLogDir> logDir_;             ///< <log dir>/<run id>_<random>
  RunHistory history_;                            ///< attempts, failures, the end; the report
  NodeRounds rounds_;                             ///< rendezvous, the round's store, the current round
  WorkerGroup group_;                             ///< the current attempt's workers
  MachineEvidence evidence_;                      ///< /proc, the ranks' memory and stacks, read off the loop
  std::unique_ptr<EvidenceRecorder> recorder_;    ///< --watch-record: in front of the group and the evidence
  WorkerWatch watch_;                             ///< progress, hangs, stragglers, stacks
  AgentPolicy policy_;                            ///< the decisions
  AttemptPlan plan_;                              ///< what each rank of an attempt runs
  StartMethods starts_;                           ///< forkserver template and spare rank
  ReplacementCoordinator replacement_;            ///< --restart-scope rank
  JobControl jobControl_;                         ///< ddprun's own signals
  std::unique_ptr<status::StatusServer> status_;  ///< --status-port
};

}  // namespace ddprun::launcher
