#include "launcher/agent.hpp"

#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <thread>

#include "common/env.hpp"
#include "common/error.hpp"
#include "common/forkserver.hpp"
#include "common/shm_names.hpp"
#include "common/spare_rank.hpp"
#include "launcher/config/local_host.hpp"
#include "launcher/config/scheduler_env.hpp"
#include "launcher/output_drain.hpp"
#include "launcher/process/console_writer.hpp"
#include "launcher/process/numa_binding.hpp"
#include "launcher/process/spare_rank.hpp"

namespace ddprun::launcher {
namespace asio = boost::asio;

namespace {

/// The part of the plan the workers' store uses.
RoundStoreSettings roundStoreSettings(const LaunchPlan& plan) {
  return {plan.mode, plan.standalone, plan.masterAddr, plan.masterPort, plan.useAgentStore, plan.localAddr};
}

/// The part of the plan the rendezvous uses.
SessionSettings sessionSettings(const LaunchPlan& plan) {
  return {plan.mode,     plan.rdzvBackend, plan.rdzvHost, plan.rdzvPort,   plan.rdzvId,     plan.rdzv,
          plan.minNodes, plan.maxNodes,    plan.nodeRank, plan.masterAddr, plan.masterPort, plan.localAddr};
}

/// "3" or "4-7": the global ranks `first` .. first + count - 1.
std::string rankRange(int first, int count) {
  return count <= 1 ? std::to_string(first) : std::to_string(first) + "-" + std::to_string(first + count - 1);
}

/// "1 worker", "2 workers".
std::string workers(int count) { return std::to_string(count) + (count == 1 ? " worker" : " workers"); }

std::string describeRound(const rendezvous::RoundAssignment& round, int nproc) {
  return "round " + std::to_string(round.round) + ": group rank " + std::to_string(round.groupRank) + " of " +
         std::to_string(round.groupWorldSize) + ", ranks " + rankRange(round.rankOffset, nproc) + ", world size " +
         std::to_string(round.worldSize) + ", MASTER_ADDR=" + round.masterAddr +
         " MASTER_PORT=" + std::to_string(round.masterPort);
}

rendezvous::NodeOutcome outcomeOf(NodeEnd end) {
  switch (end) {
    case NodeEnd::kSucceeded: return rendezvous::NodeOutcome::kSucceeded;
    case NodeEnd::kStopped: return rendezvous::NodeOutcome::kStopped;
    case NodeEnd::kFailed:
    case NodeEnd::kAbandoned: return rendezvous::NodeOutcome::kFailed;
  }
  return rendezvous::NodeOutcome::kFailed;
}

FlightRecorderFiles flightRecorderOf(const std::string& rankDir, int rank) {
  return flightRecorderFiles(rankDir, rank, [](const char* name) { return getEnv(name); });
}

bool isStopSignal(int signal) { return signal == SIGINT || signal == SIGTERM || signal == SIGHUP || signal == SIGQUIT; }

/// Slurm's warnings (SIGUSR1, SIGUSR2) and every listed signal that does not stop the job: these are read with
/// their sender, the stop signals through the Asio signal set.
std::vector<int> warningSignals(const std::vector<int>& listed) {
  std::vector<int> signals{SIGUSR1, SIGUSR2};
  for (int signal : listed) {
    if (!isStopSignal(signal) && std::find(signals.begin(), signals.end(), signal) == signals.end()) {
      signals.push_back(signal);
    }
  }
  return signals;
}

}  // namespace

Agent::Agent(LaunchPlan plan, OrphanGuard& guard)
    : config_(std::move(plan)),
      spec_(makeWorkerSpec(config_)),
      guard_(guard),
      reaper_(io_),
      signals_(io_, SIGINT, SIGTERM, SIGHUP),
      warnings_(io_, warningSignals(config_.signalsToHandle)),
      jobControl_(io_, SIGTSTP, SIGCONT, SIGWINCH),
      ticker_(io_, std::chrono::duration<double>(config_.monitorInterval)),
      roundStore_(io_, roundStoreSettings(config_)),
      group_(io_, reaper_, std::chrono::duration<double>(config_.stopTimeout),
             [this](const WorkerExitEvent& event, bool allExited) { onWorkerExit(event, allExited); }),
      evidence_(io_, reaper_),
      watch_(
          io_, SystemClock::instance(), group_, evidence_,
          {config_.hang, config_.straggler, spec_.python, config_.mode != RendezvousMode::kSingleNode},
          [this](const std::string& key, const std::string& value) {
            // The round's workers' store: this agent's, or (several nodes) the one group rank 0's node serves.
            // Without the agent store, rank 0's own process serves it: nothing to write into.
            if (!config_.useAgentStore) return false;
            try {
              workersStore().set(key, value);
              return true;
            } catch (const std::exception& e) {
              spdlog::warn("could not write {} into the workers' store: {}", key, e.what());
              return false;
            }
          },
          [this](std::vector<WorkerFailure> hung) {
            failureSeen_ = std::chrono::steady_clock::now();
            firstSign_ = "hang";
            policy_.onHang(std::move(hung));
          }),
      policy_(*this, config_.maxRestarts, config_.mode != RendezvousMode::kSingleNode, config_.maxNoProgressRestarts) {
  // ddprun's own stop signals and Slurm's warnings always, and whatever --signals-to-handle lists: a signal is never
  // the silent end of ddprun.
  signals_.add(SIGQUIT);
  group_.setOrphanGuard(&guard_);
}

Agent::~Agent() = default;

// --- actions -------------------------------------------------------------------------------------------------

void Agent::beginRendezvous() {
  // No workers while the nodes meet: nothing to tick for. A thousand agents waiting on one machine (or one
  // agent waiting minutes for its peers) then cost no wake-ups every --monitor-interval.
  ticker_.stop();
  rendezvous::NodeDescriptor self;
  self.addr = config_.localAddr.empty() ? hostName() : config_.localAddr;
  self.id = self.addr + "_" + std::to_string(::getpid());
  self.nproc = config_.nproc;
  if (config_.mode == RendezvousMode::kDynamic) {
    self.storeAddr = self.addr;  // where the other nodes reach this node
    self.storePort = roundStore_.startForRound();
  }
  session_->post(
      [this, self](rendezvous::RendezvousHandler& handler) {
        try {
          auto round = handler.next(self, session_->cancelFlag());
          session_->noteNextCheck(handler);  // a new round is checked at once
          asio::post(io_, [this, round] {
            if (policy_.state() != AgentState::kRendezvous) return;
            spdlog::info("{}", describeRound(round, config_.nproc));
            round_ = round;
            policy_.onRoundComplete();
          });
        } catch (const rendezvous::RendezvousCancelled&) {
          // ddprun is already stopping.
        } catch (const std::exception& e) {
          failRendezvous(e.what());
        }
      },
      [this](const std::string& message) { failRendezvous(message); });
}

void Agent::startWorkers() {
  // Posted: the policy may ask from inside a worker's exit handler, and starting replaces that worker.
  asio::post(io_, [this] {
    if (policy_.state() != AgentState::kRunning) return;
    if (!ticker_.running()) ticker_.start();
    try {
      startAttempt(round_ ? *round_ : singleNodeRound());
    } catch (const std::exception& e) {
      spdlog::error("{}", e.what());
      policy_.onFatalError();
    }
  });
}

void Agent::stopWorkers(int signal) {
  // A membership change is seen here (a failure or a hang earlier, when it happens).
  if (policy_.stopReason() == StopReason::kMembershipChange) {
    failureSeen_ = std::chrono::steady_clock::now();
    firstSign_ = "membership change";
  }
  if (signal != SIGTERM || policy_.stopReason() == StopReason::kSignal) {
    spdlog::info("sending {} to the workers (SIGKILL after {} s)", signalName(signal), config_.stopTimeout);
  }
  group_.stop(signal);
}

void Agent::killWorkers() { group_.kill(); }

void Agent::killWorker(int localRank) {
  spdlog::info("sending SIGKILL to rank {} (pid {}) alone", group_.globalRank(static_cast<size_t>(localRank)),
               group_.pid(static_cast<size_t>(localRank)));
  group_.kill(static_cast<size_t>(localRank));
}

void Agent::saveTracebacks() {
  watch_.saveTracebacksThen([this] { policy_.onTracebacksSaved(); });
}

void Agent::endAttempt(const AttemptEnd& end) {
  removeLeftoverSegments(history_->currentAttempt());
  auto records = watch_.completeRecords(end.failures);
  group_.addOutputHints(records, config_.useAgentStore);
  const std::string summary =
      records.empty() ? "" : formatFailureSummary(config_.program, config_.role, records, hostName());
  history_->endAttempt(end.reason, watch_.bestStep(), records, summary);
}

void Agent::reportFailures(const std::vector<WorkerFailure>& failures) {
  auto records = watch_.completeRecords(failures);
  group_.addOutputHints(records, config_.useAgentStore);
  consoleErr().write(ConsoleWriter::kSelf, formatFailureSummary(config_.program, config_.role, records, hostName()),
                     false);
}

void Agent::finishNode(NodeEnd end, int exitCode) {
  history_->jobEnded(exitCode, describe(end, exitCode));
  if (!session_ || end == NodeEnd::kAbandoned) {
    finish();
    return;
  }
  if (end == NodeEnd::kStopped) session_->cancel();  // a join in progress gives up (and leaves its round) at once
  session_->post(
      [this, end, exitCode](rendezvous::RendezvousHandler& handler) {
        handler.finish(outcomeOf(end), session_->cancelFlag());
        asio::post(io_, [this] { finish(); });
      },
      [this](const std::string&) { asio::post(io_, [this] { finish(); }); });
}

void Agent::cutFinishShort() {
  if (session_) session_->cancel();  // the exit barrier checks the flag at each look (at least once a second)
}

void Agent::confirmMembership() {
  if (config_.mode != RendezvousMode::kDynamic || !session_) {
    // A static job has no membership to change.
    asio::post(io_, [this] { policy_.onMembershipVerdict(MembershipVerdict::kUnchanged); });
    return;
  }
  session_->post(
      [this](rendezvous::RendezvousHandler& handler) {
        // Checked every 20 ms: the node's watcher ends the round for it as soon as it sees the gone mark.
        const auto until = std::chrono::steady_clock::now() + handler.nodeLossSeenWithin();
        auto verdict = MembershipVerdict::kUnchanged;
        try {
          handler.expectChange();
          while (verdict == MembershipVerdict::kUnchanged && std::chrono::steady_clock::now() < until) {
            const auto membership = handler.check();
            if (membership == rendezvous::Membership::kBackendUnreachable) {
              verdict = MembershipVerdict::kStoreUnreachable;
            } else if (membership != rendezvous::Membership::kStable) {
              verdict = MembershipVerdict::kRoundChanged;
            } else {
              std::this_thread::sleep_for(std::chrono::milliseconds(20));
            }
          }
        } catch (const std::exception& e) {
          spdlog::debug("membership check after a failure: {}", e.what());
        }
        session_->noteNextCheck(handler);  // expectChange() quickened the pace
        asio::post(io_, [this, verdict] { policy_.onMembershipVerdict(verdict); });
      },
      [this](const std::string&) {
        asio::post(io_, [this] { policy_.onMembershipVerdict(MembershipVerdict::kUnchanged); });
      });
}

// --- attempts ------------------------------------------------------------------------------------------------

rendezvous::RoundAssignment Agent::singleNodeRound() const {
  rendezvous::RoundAssignment round;
  round.worldSize = config_.nproc;
  round.masterAddr = roundStore_.masterAddr();
  round.masterPort = roundStore_.masterPort();
  return round;
}

std::vector<WorkerGroup::Member> Agent::membersFor(const rendezvous::RoundAssignment& round, int attempt) const {
  std::vector<WorkerGroup::Member> members;
  const std::vector<NumaBinding> numa = numaPlan();
  for (int local = 0; local < config_.nproc; ++local) {
    WorkerAssignment assignment;
    assignment.localRank = local;
    assignment.groupRank = round.groupRank;
    assignment.globalRank = round.rankOffset + local;
    assignment.roleRank = assignment.globalRank;
    assignment.localWorldSize = config_.nproc;
    assignment.worldSize = round.worldSize;
    assignment.roleWorldSize = round.worldSize;
    assignment.groupWorldSize = round.groupWorldSize;

    const WorkerLogPaths paths =
        workerLogPaths(logDir_->path(), attempt, local, {config_.redirects, config_.tee, config_.localRanksFilter});
    RunLogDir::prepare(paths);
    const AttemptInfo info{attempt,
                           round.masterAddr,
                           round.masterPort,
                           config_.useAgentStore,
                           paths.errorFile,
                           paths.progressFile,
                           flightRecorderOf(paths.dir, assignment.globalRank)};

    WorkerGroup::Member member;
    member.localRank = local;
    member.globalRank = assignment.globalRank;
    member.errorFile = paths.errorFile;
    WorkerLaunch& launch = member.launch;
    launch.command = spec_.command;
    launch.env = workerEnvironment(spec_, assignment, info);
    if (policy_.replacesRanks()) launch.env["DDPRUN_RESTART_SCOPE"] = "rank";
    launch.output.prefix = linePrefix(spec_.prefixTemplate, spec_.role, assignment.globalRank, local);
    launch.output.stdoutFile = paths.stdoutFile;
    launch.output.stderrFile = paths.stderrFile;
    launch.output.stdoutToConsole = paths.stdoutToConsole;
    launch.output.stderrToConsole = paths.stderrToConsole;
    launch.output.allowTerminal = spec_.allowTerminal;
    launch.inheritStdin = local == 0;  // pdb and input() on local rank 0, as under torchrun
    launch.source = assignment.globalRank;
    launch.forkServer = forkServer_.get();
    const std::string attemptDir = std::filesystem::path(paths.dir).parent_path().string();
    launch.output.stdoutFilters = config_.duplicateStdoutFilters;
    launch.output.stderrFilters = config_.duplicateStderrFilters;
    launch.output.stdoutFilteredFile = attemptDir + "/filtered_stdout.log";
    launch.output.stderrFilteredFile = attemptDir + "/filtered_stderr.log";
    if (!numa.empty()) {
      launch.cpus = numa[static_cast<size_t>(local)].cpus;
      launch.memoryNode = numa[static_cast<size_t>(local)].memoryNode;
    }
    members.push_back(std::move(member));
  }
  return members;
}

std::vector<NumaBinding> Agent::numaPlan() const {
  if (config_.numaBinding.empty()) return {};
  auto plan = planNumaBinding(config_.numaBinding, restrictToCpus(readNumaTopology(), allowedCpus()), config_.nproc);
  std::string text;
  for (size_t local = 0; local < plan.size(); ++local) {
    text += (text.empty() ? "" : "; ") + std::string("local rank ") + std::to_string(local) + " on CPUs " +
            formatCpuList(plan[local].cpus) + ", memory of node " + std::to_string(plan[local].memoryNode);
  }
  if (policy_.restartCount() == 0) spdlog::info("--numa-binding {}: {}", config_.numaBinding, text);
  return plan;
}

void Agent::startAttempt(const rendezvous::RoundAssignment& round) {
  const auto started = std::chrono::steady_clock::now();
  // Workers key their store traffic by TORCHELASTIC_RESTART_COUNT (/worker/attempt_N), so every node of a
  // round must give the same number: nodes restart for different reasons (a failure here, a membership
  // change there), so a multi-node job uses the round, which all of them share.
  const int attempt = session_ ? static_cast<int>(round.round) : policy_.restartCount();
  attempt_ = attempt;
  commGeneration_ = 0;
  formedTimer_.cancel();
  workersStore_.reset();  // a new round may have its store elsewhere
  auto members = membersFor(round, attempt);
  std::vector<WorkerWatch::RankFiles> files;
  for (int local = 0; local < config_.nproc; ++local) {
    const auto paths = workerLogPaths(logDir_->path(), attempt, local, {});
    files.push_back({paths.progressFile, paths.stacksFile, flightRecorderOf(paths.dir, round.rankOffset + local)});
  }
  roundStore_.clearRootKeys();  // a dump request (exception_dump) or error key of the attempt before
  group_.start(std::move(members));
  watch_.startAttempt(std::move(files));
  prepareSpareAfter(std::chrono::milliseconds(0));  // a failure may come early; the spare forks after the ranks
  history_->beginAttempt(attempt, config_.nproc);
  const std::string endedBefore = history_->previousEndReason();  // of this ddprun's own attempts
  if (endedBefore.empty() && attempt == 0) {
    spdlog::info("started {} (role {}: {}) in {:.1f} ms", workers(config_.nproc), config_.role, spec_.command[0],
                 millisecondsSince(started));
  } else if (endedBefore.empty()) {
    // This ddprun's first attempt in a job already past round 0 (a late node, or a store host that came back):
    // no failure of its own to time the start from.
    spdlog::info("attempt {}: started {} (role {}: {}) in {:.1f} ms; this node joined the job at round {}", attempt,
                 workers(config_.nproc), config_.role, spec_.command[0], millisecondsSince(started), attempt);
  } else {
    // Timed from the first sign: a failure later counted as a membership change says both.
    const std::string seen = firstSign_.empty() || firstSign_ == endedBefore
                                 ? endedBefore
                                 : firstSign_ + " (counted as a " + endedBefore + ")";
    spdlog::info("attempt {}: restarted {}, {:.1f} ms after the {} was seen", attempt, workers(config_.nproc),
                 millisecondsSince(failureSeen_), seen);
  }
}

void Agent::onWorkerExit(const WorkerExitEvent& event, bool allExited) {
  if (!event.exit.succeeded() && policy_.state() == AgentState::kRunning) {
    failureSeen_ = std::chrono::steady_clock::now();
    firstSign_ = "failure";
  }
  // Only a job whose workers report progress can be judged by it (a stock script never is).
  if (allExited && watch_.everReported()) {
    policy_.recordAttemptProgress(watch_.startStep().value_or(-1), watch_.bestStep().value_or(-1));
  }
  policy_.onWorkerExit(event, allExited);
  watch_.workerExited();
}

void Agent::removeLeftoverSegments(std::optional<int> attempt) {
  // A worker of the shm backend killed while its group started leaves its segment in /dev/shm.
  const ShmCleanup cleanup = removeShmSegments(spec_.launchToken, attempt);
  if (!cleanup.removed.empty()) {
    spdlog::info("removed {} shared-memory segment(s) the workers left in {}", cleanup.removed.size(), kShmDir);
  }
  for (const auto& error : cleanup.errors) spdlog::warn("{}", error);
}

// --- events from elsewhere -----------------------------------------------------------------------------------

void Agent::failRendezvous(const std::string& message) {
  asio::post(io_, [this, message] {
    if (policy_.state() == AgentState::kFinishing || policy_.state() == AgentState::kDone) return;
    spdlog::error("{}", message);
    policy_.onFatalError();
  });
}

void Agent::checkMembership() {
  if (policy_.state() != AgentState::kRunning || checkInFlight_ || !session_->checkDue()) return;
  checkInFlight_ = true;
  session_->post(
      [this](rendezvous::RendezvousHandler& handler) {
        try {
          const auto membership = handler.check();
          session_->noteNextCheck(handler);
          asio::post(io_, [this, membership] {
            checkInFlight_ = false;
            // An unreachable backend is an outage: check() reports it lost after the liveness expiry.
            if (membership == rendezvous::Membership::kStable ||
                membership == rendezvous::Membership::kBackendUnreachable || policy_.state() != AgentState::kRunning) {
              return;
            }
            spdlog::warn("{}", membership == rendezvous::Membership::kNodesWaiting ? "nodes are waiting to join"
                                                                                   : "a node left the worker group");
            policy_.onMembershipChange();
          });
        } catch (const std::exception& e) {
          const std::string message = e.what();
          asio::post(io_, [this, message] {
            checkInFlight_ = false;
            if (policy_.state() == AgentState::kFinishing || policy_.state() == AgentState::kDone) return;
            spdlog::error("{}; stopping the workers", message);
            policy_.onBackendLost();
          });
        }
      },
      [](const std::string&) {});
}

void Agent::waitForSignals() {
  signals_.async_wait([this](const boost::system::error_code& ec, int signal) {
    if (ec) return;
    onSignal(signal, 0);
    waitForSignals();
  });
}

void Agent::onSignal(int signal, pid_t sender) {
  const auto& listed = config_.signalsToHandle;
  const bool handled = std::find(listed.begin(), listed.end(), signal) != listed.end();
  if (!handled) {
    spdlog::warn(
        "received {}, which --signals-to-handle does not list: stopping the workers (SIGTERM) and exiting with {}",
        signalName(signal), 128 + signal);
    policy_.onSignal(signal, SIGTERM);
  } else if (isStopSignal(signal)) {
    policy_.onSignal(signal);
  } else if (sender > 0 && signalReachedTheWholeStep(processName(sender))) {
    // SIGUSR1 and the like from Slurm: the workers have it already, straight from Slurm.
    spdlog::info(
        "received {} from Slurm, which signals every process of the job step: the workers have it too, so ddprun "
        "does not forward it again",
        signalName(signal));
  } else {
    // SIGUSR1 and the like (Slurm's "time is nearly up"): the workers decide what to do; the job goes on.
    spdlog::info("received {}; forwarding it to the workers (--signals-to-handle)", signalName(signal));
    group_.signalAll(signal);
  }
}

void Agent::waitForJobControl() {
  jobControl_.async_wait([this](const boost::system::error_code& ec, int signal) {
    if (ec) return;
    if (signal == SIGTSTP) suspend();
    if (signal == SIGCONT) {
      group_.resume();
      watch_.resume();
      // A SIGCONT that follows no SIGTSTP (timeout(1) sends one with its SIGTERM) continues nothing: no line.
      if (suspended_) spdlog::info("continued (SIGCONT): the workers run again");
      suspended_ = false;
    }
    if (signal == SIGWINCH) group_.resize(STDOUT_FILENO);
    waitForJobControl();
  });
}

void Agent::suspend() {
  spdlog::info("stopped (SIGTSTP): the workers are stopped too; fg or bg resumes them");
  suspended_ = true;
  watch_.pause();
  group_.suspend();
  consoleErr().flush(std::chrono::milliseconds(100));
  ::raise(SIGSTOP);  // ddprun itself, as the terminal asked; SIGCONT (fg, bg) continues here
}

void Agent::finish() {
  policy_.onFinished();
  if (session_) session_->cancel();
  signals_.cancel();
  warnings_.cancel();
  jobControl_.cancel();
  ticker_.stop();
  roundStore_.stop();
  spareTimer_.cancel();
  spare_.reset();       // an unclaimed spare is killed
  forkServer_.reset();  // the template exits with its connection
  io_.stop();
}

void Agent::startStatusPage() {
  status::StatusServerOptions options;
  options.host = config_.statusHost;
  options.port = static_cast<uint16_t>(config_.statusPort);
  try {
    status_ = std::make_unique<status::StatusServer>(io_, options, [this] { return snapshot(); });
  } catch (const status::StatusBindError& e) {
    throw ConfigError(std::string("--status-port: ") + e.what());
  }
  spdlog::info("status page on {} (also /status.json and /metrics)", status_->url());
}

void Agent::startForkServerThen(std::function<void()> then) {
  if (config_.startMethod != StartMethod::kForkserver) {
    then();
    return;
  }
  const std::string program = resolveProgram(spec_.command[0]);
  if (!config_.pythonInterpreter.empty() || program.empty() || !supportsForkServer(program)) {
    spdlog::info("--start-method forkserver: {} does not support it (no {} section); ranks start the normal way",
                 spec_.command[0], kForkServerSection);
    then();
    return;
  }
  // The ranks are forked by the template's child, which exits: ddprun adopts them as a child subreaper.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  guard_.start();  // its pid, which the reaper leaves to it, exists from here on
  reaper_.reapAdopted(guard_.pid());
  forkServer_ = std::make_unique<ForkTemplate>(io_, reaper_, guard_);
  forkServer_->start(spec_.command, templateEnvironment(spec_, config_.nproc), [this, then, program](bool ready) {
    if (ready && policy_.replacesRanks() && supportsSpareRank(program)) {
      spare_ = std::make_unique<SpareRank>(io_, reaper_, guard_);
    }
    then();
  });
}

void Agent::prepareSpareAfter(std::chrono::milliseconds delay) {
  if (!spare_) return;
  spareTimer_.expires_after(delay);
  spareTimer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || policy_.state() != AgentState::kRunning || !forkServer_) return;
    // The template's environment: everything of a rank's own comes with the claim.
    spare_->prepare(*forkServer_, templateEnvironment(spec_, config_.nproc));
  });
}

int Agent::run() {
  logDir_ = std::make_unique<RunLogDir>(config_.logDir, config_.rdzvId);
  // Killed with SIGKILL, ddprun cannot clean up: the orphan guard removes the empty directories it leaves (from the
  // first worker on: before, no guardian runs).
  guard_.pruneOnExit(logDir_->path());
  if (logDir_->temporary()) guard_.pruneOnExit(logDir_->base());
  history_ =
      std::make_unique<RunHistory>(logDir_->path(), SystemClock::instance(), config_.eventLogHandler == "console");
  if (config_.statusPort >= 0) startStatusPage();
  const bool keepFiles = writesLogFiles({config_.redirects, config_.tee, config_.localRanksFilter});
  if (keepFiles) spdlog::info("worker logs (--redirects/--tee) go to {}", logDir_->path());
  spdlog::debug("launch token {}: the workers' shared-memory segments are {}/{}*", spec_.launchToken, kShmDir,
                shmRunPrefix(spec_.launchToken));
  waitForSignals();
  warnings_.asyncWait([this](int signal, pid_t sender) { onSignal(signal, sender); });
  waitForJobControl();
  // Single node, and node 0 of a static job: one store serves every round.
  if (config_.mode == RendezvousMode::kSingleNode ||
      (config_.mode == RendezvousMode::kStatic && config_.nodeRank == 0)) {
    roundStore_.startFixed();
  }
  if (config_.mode != RendezvousMode::kSingleNode) {
    session_ = std::make_unique<RendezvousSession>(sessionSettings(config_));
    ticker_.add("membership", [this] { checkMembership(); });
  }
  ticker_.add("progress", [this] { watch_.tick(); });
  ticker_.start();
  if (rankReplacementUsable()) policy_.enableRankReplacement();
  rendezvousId_ = (config_.localAddr.empty() ? hostName() : config_.localAddr) + "_" + std::to_string(::getpid());
  startForkServerThen([this] {
    if (policy_.state() == AgentState::kRendezvous) policy_.start();
  });
  io_.run();
  wrapUp();
  logDir_->finish(policy_.exitCode() == 0, keepFiles, RunHistory::reportFiles());
  return policy_.exitCode();
}

void Agent::wrapUp() {
  // The workers' last output reaches the console however long its reader takes (a signal, before or during the
  // wait, ends it after half a second without progress); what the console cannot take then is saved next to the logs.
  // Every other handler sees the agent done and does nothing.
  bool signalled = policy_.exitCode() > 128;
  signals_.async_wait([&signalled](const boost::system::error_code& ec, int) { signalled = signalled || !ec; });
  if (!drainWorkerOutput(io_, group_, std::chrono::milliseconds(5000), &signalled, std::chrono::milliseconds(500))) {
    saveUnshownOutput(group_, logDir_->path());
  }
  signals_.cancel();
  // An open status page (one that polled in the last seconds) gets one more poll to see how the job ended.
  if (status_ && std::chrono::steady_clock::now() - status_->lastStatusRequest() < std::chrono::seconds(3)) {
    const uint64_t polls = status_->statusRequests();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
    while (status_->statusRequests() == polls && io_.run_one_until(deadline) > 0) {
    }
  }
  if (status_) status_->stop();
  session_.reset();  // joins the rendezvous thread before anything it uses goes away
  removeLeftoverSegments(std::nullopt);
  if (const std::string report = history_->writeReport(snapshot()); !report.empty()) {
    spdlog::info("run report: {} (and status.json, attempts.jsonl beside it)", report);
  }
}

}  // namespace ddprun::launcher
