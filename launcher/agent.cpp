#include "launcher/agent.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <optional>

#include "common/error.hpp"
#include "common/shm_names.hpp"
#include "launcher/config/local_host.hpp"
#include "launcher/output_drain.hpp"
#include "launcher/process/console_writer.hpp"
#include "launcher/process/process_spawn.hpp"
#include "launcher/status/metrics_export.hpp"
#include "launcher/watch/evidence/stack_collector.hpp"

namespace ddprun::launcher {
namespace asio = boost::asio;
namespace {

/// "1 worker", "2 workers".
std::string workers(int count) { return std::to_string(count) + (count == 1 ? " worker" : " workers"); }

/// Removes the run's shared-memory segments left in /dev/shm (one attempt's, or all): a worker of the shm backend
/// killed while its group started leaves its segment behind.
void removeLeftoverSegments(const std::string& launchToken, std::optional<int> attempt) {
  const ShmCleanup cleanup = removeShmSegments(launchToken, attempt);
  if (!cleanup.removed.empty()) {
    spdlog::info("removed {} shared-memory segment(s) the workers left in {}", cleanup.removed.size(), kShmDir);
  }
  for (const auto& error : cleanup.errors) spdlog::warn("{}", error);
}

WorkerWatch::Settings watchSettings(const LaunchPlan& config, const WorkerSpec& spec) {
  return {config.hang, config.straggler, spec.python, config.mode != RendezvousMode::kSingleNode};
}

/// --watch-record: a recorder in front of the group and the machine's evidence; none without the flag.
std::unique_ptr<EvidenceRecorder> watchRecorder(const LaunchPlan& config, WorkerGroupView& group,
                                                EvidenceSource& evidence) {
  if (config.watchRecord.empty()) return nullptr;
  TraceHeader header;
  header.startUnixMs =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  header.monitorInterval = config.monitorInterval;
  header.hang = config.hang;
  header.straggler = config.straggler;
  header.pythonWorkers = makeWorkerSpec(config).python;
  header.multiNode = config.mode != RendezvousMode::kSingleNode;
  return std::make_unique<EvidenceRecorder>(config.watchRecord, SystemClock::instance(), header, group, evidence);
}

/// This node in the job-wide replacement lock: its address and pid.
std::string nodeId(const LaunchPlan& config) {
  return (config.localAddr.empty() ? hostName() : config.localAddr) + "_" + std::to_string(::getpid());
}

}  // namespace

Agent::Agent(LaunchPlan plan, OrphanGuard& guard)
    : config_(std::move(plan)),
      reaper_(io_),
      ticker_(io_, std::chrono::duration<double>(config_.monitorInterval)),
      logDir_(std::make_unique<RunLogDir>(config_.logDir, config_.rdzvId)),
      history_(logDir_->path(), SystemClock::instance(), config_.eventLogHandler == "console"),
      rounds_(io_, config_),
      group_(io_, reaper_, std::chrono::duration<double>(config_.stopTimeout),
             [this](const WorkerExitEvent& event, bool allExited) { onWorkerExit(event, allExited); }),
      evidence_(io_, reaper_),
      recorder_(watchRecorder(config_, group_, evidence_)),
      watch_(
          io_, SystemClock::instance(), recorder_ ? static_cast<WorkerGroupView&>(*recorder_) : group_,
          recorder_ ? static_cast<EvidenceSource&>(*recorder_) : evidence_,
          watchSettings(config_, makeWorkerSpec(config_)),
          [this](const std::string& key, const std::string& value) { return setWorkersStoreKey(key, value); },
          [this](std::vector<WorkerFailure> hung) { onHangVerdict(std::move(hung)); }),
      policy_(*this, config_.maxRestarts, config_.mode != RendezvousMode::kSingleNode, config_.maxNoProgressRestarts),
      plan_(config_, makeWorkerSpec(config_), logDir_->path(), planNuma(config_)),
      starts_(io_, reaper_, guard),
      replacement_(io_, {policy_, group_, watch_, history_, plan_, starts_}, nodeId(config_), config_.useAgentStore),
      jobControl_(io_, config_.signalsToHandle, policy_, group_, watch_) {
  group_.setOrphanGuard(&guard);
  // Killed with SIGKILL, ddprun cannot clean up: the orphan guard removes the empty directories it leaves (from the
  // first worker on: before, no guardian runs).
  guard.pruneOnExit(logDir_->path());
  if (logDir_->temporary()) guard.pruneOnExit(logDir_->base());
}

Agent::~Agent() = default;

// --- the policy's actions ------------------------------------------------------------------------------------

void Agent::beginRendezvous() {
  // No workers while the nodes meet: nothing to tick for.
  ticker_.stop();
  rounds_.join(
      [this] {
        if (policy_.state() == AgentState::kRendezvous) policy_.onRoundComplete();
      },
      [this](const std::string& message) { onRendezvousFailed(message); });
}

void Agent::startWorkers() {
  // Posted: the policy may ask from inside a worker's exit handler, and starting replaces that worker.
  asio::post(io_, [this] {
    if (policy_.state() != AgentState::kRunning) return;
    if (!ticker_.running()) ticker_.start();
    try {
      startAttempt();
    } catch (const std::exception& e) {
      spdlog::error("{}", e.what());
      policy_.onFatalError();
    }
  });
}

void Agent::stopWorkers(int signal) {
  // A membership change is seen here (a failure or a hang earlier, when it happens).
  if (policy_.stopReason() == StopReason::kMembershipChange) history_.signSeen(FirstSign::kMembershipChange);
  if (signal != SIGTERM || policy_.stopReason() == StopReason::kSignal) {
    spdlog::info("sending {} to the workers (SIGKILL after {} s)", signalName(signal), config_.stopTimeout);
  }
  watch_.groupStopping();
  group_.stop(signal);
}

void Agent::killWorkers() { group_.kill(); }

void Agent::killWorker(int localRank) {
  const auto local = static_cast<size_t>(localRank);
  spdlog::info("sending SIGKILL to rank {} (pid {}) alone", group_.globalRank(local), group_.pid(local));
  group_.kill(local);
}

void Agent::saveTracebacks() {
  watch_.saveTracebacksThen([this] { policy_.onTracebacksSaved(); });
}

void Agent::endAttempt(const AttemptEnd& end) {
  removeLeftoverSegments(plan_.spec().launchToken, history_.currentAttempt());
  std::string summary;
  const auto records = completeRecords(end.failures, &summary);
  history_.endAttempt(end.reason, watch_.bestStep(), records, summary);
}

void Agent::reportFailures(const std::vector<WorkerFailure>& failures) {
  std::string summary;
  completeRecords(failures, &summary);
  consoleErr().write(ConsoleWriter::kSelf, summary, false);
}

void Agent::finishNode(NodeEnd end, int exitCode) {
  history_.jobEnded(exitCode, describe(end, exitCode));
  rounds_.finish(end, [this] { finish(); });
}

void Agent::cutFinishShort() { rounds_.cancel(); }

void Agent::confirmMembership() {
  rounds_.confirm([this](MembershipVerdict verdict) { policy_.onMembershipVerdict(verdict); });
}

void Agent::replaceWorker(const WorkerExitEvent& event) { replacement_.replace(event); }

// --- the parts' events ---------------------------------------------------------------------------------------

void Agent::onWorkerExit(const WorkerExitEvent& event, bool allExited) {
  if (!event.exit.succeeded() && policy_.state() == AgentState::kRunning) history_.signSeen(FirstSign::kFailure);
  // Only a job whose workers report progress can be judged by it (a stock script never is).
  if (allExited && watch_.everReported()) {
    policy_.recordAttemptProgress(watch_.startStep().value_or(-1), watch_.bestStep().value_or(-1));
  }
  policy_.onWorkerExit(event, allExited);
}

void Agent::onHangVerdict(std::vector<WorkerFailure> hung) {
  history_.signSeen(FirstSign::kHang);
  policy_.onHang(std::move(hung));
}

bool Agent::setWorkersStoreKey(const std::string& key, const std::string& value) {
  return replacement_.setKey(key, value);
}

void Agent::onRendezvousFailed(const std::string& message) {
  if (policy_.state() == AgentState::kFinishing || policy_.state() == AgentState::kDone) return;
  spdlog::error("{}", message);
  policy_.onFatalError();
}

void Agent::onMembershipTick() {
  if (policy_.state() != AgentState::kRunning) return;
  rounds_.check(
      [this](rendezvous::Membership membership) {
        if (policy_.state() != AgentState::kRunning) return;
        spdlog::warn("{}", membership == rendezvous::Membership::kNodesWaiting ? "nodes are waiting to join"
                                                                               : "a node left the worker group");
        policy_.onMembershipChange();
      },
      [this](const std::string& message) {
        if (policy_.state() == AgentState::kFinishing || policy_.state() == AgentState::kDone) return;
        spdlog::error("{}; stopping the workers", message);
        policy_.onBackendLost();
      });
}

// --- attempts and the run ------------------------------------------------------------------------------------

void Agent::startAttempt() {
  const auto started = std::chrono::steady_clock::now();
  const rendezvous::RoundAssignment round = rounds_.current();
  // Workers key their store traffic by TORCHELASTIC_RESTART_COUNT (/worker/attempt_N), so every node of a round must
  // give the same number: nodes restart for different reasons, so a multi-node job uses the round they all share.
  const int attempt = rounds_.multiNode() ? static_cast<int>(round.round) : policy_.restartCount();
  auto members = plan_.members(round, {attempt, 0});
  for (int local = 0; local < config_.nproc; ++local) RunLogDir::prepare(plan_.logPaths(attempt, local));
  rounds_.clearRootKeys();  // a dump request (exception_dump) or error key of the attempt before
  replacement_.startAttempt(round, attempt, rounds_.workersStore());
  group_.start(std::move(members));
  watch_.startAttempt(plan_.rankFiles(round, attempt));
  // A failure may come early; the spare forks after the ranks.
  starts_.prepareSpareAfter(std::chrono::milliseconds(0), [this] { return policy_.state() == AgentState::kRunning; });
  history_.beginAttempt(attempt, config_.nproc);
  const std::string what = "role " + config_.role + ": " + plan_.spec().command[0];
  spdlog::info("{}", history_.describeStart(attempt, workers(config_.nproc), what, millisecondsSince(started)));
}

std::vector<WorkerFailure> Agent::completeRecords(const std::vector<WorkerFailure>& failures,
                                                  std::string* summary) const {
  auto records = watch_.completeRecords(failures);
  group_.addOutputHints(records, config_.useAgentStore);
  *summary = records.empty() ? "" : formatFailureSummary(config_.program, config_.role, records, hostName());
  return records;
}

void Agent::finish() {
  policy_.onFinished();
  rounds_.stop();
  jobControl_.cancel();
  ticker_.stop();
  starts_.stop();  // an unclaimed spare is killed; the template exits with its connection
  io_.stop();
}

void Agent::startStatusPage() {
  status::StatusServerOptions options;
  options.host = config_.statusHost;
  options.port = static_cast<uint16_t>(config_.statusPort);
  try {
    status_ = std::make_unique<status::StatusServer>(io_, options, [this] { return takeSnapshot(snapshotSources()); });
  } catch (const status::StatusBindError& e) {
    throw ConfigError(std::string("--status-port: ") + e.what());
  }
  spdlog::info("status page on {} (also /status.json and /metrics)", status_->url());
}

SnapshotSources Agent::snapshotSources() const { return {config_, rounds_, history_, policy_, watch_, group_}; }

int Agent::run() {
  if (config_.statusPort >= 0) startStatusPage();
  const bool keepFiles = writesLogFiles({config_.redirects, config_.tee, config_.localRanksFilter});
  if (keepFiles) spdlog::info("worker logs (--redirects/--tee) go to {}", logDir_->path());
  spdlog::debug("launch token {}: the workers' shared-memory segments are {}/{}*", plan_.spec().launchToken, kShmDir,
                shmRunPrefix(plan_.spec().launchToken));
  jobControl_.start();
  rounds_.startFixedStore();
  if (rounds_.multiNode()) ticker_.add("membership", [this] { onMembershipTick(); });
  ticker_.add("progress", [this] { watch_.tick(); });
  ticker_.start();
  const bool replaceRanks = ReplacementCoordinator::usable(config_, plan_.spec());
  if (replaceRanks) policy_.enableRankReplacement();
  plan_.replaceRanks(replaceRanks);
  auto begin = [this] {
    plan_.useForkServer(starts_.forkServer());
    if (policy_.state() == AgentState::kRendezvous) policy_.start();
  };
  if (config_.startMethod == StartMethod::kForkserver) {
    // A script run under --python-interpreter has no template of its own.
    const std::string program = config_.pythonInterpreter.empty() ? resolveProgram(plan_.spec().command[0]) : "";
    starts_.startForkServer(program, plan_.spec().command, templateEnvironment(plan_.spec(), config_.nproc),
                            replaceRanks, begin);
  } else {
    begin();
  }
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
  jobControl_.noteStopSignal(&signalled);
  if (!drainWorkerOutput(io_, group_, std::chrono::milliseconds(5000), &signalled, std::chrono::milliseconds(500))) {
    saveUnshownOutput(group_, logDir_->path());
  }
  jobControl_.cancel();
  // An open status page (one that polled in the last seconds) gets one more poll to see how the job ended.
  if (status_ && std::chrono::steady_clock::now() - status_->lastStatusRequest() < std::chrono::seconds(3)) {
    const uint64_t polls = status_->statusRequests();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
    while (status_->statusRequests() == polls && io_.run_one_until(deadline) > 0) {
    }
  }
  if (status_) status_->stop();
  rounds_.close();  // joins the rendezvous thread before anything it uses goes away
  removeLeftoverSegments(plan_.spec().launchToken, std::nullopt);
  const status::AgentSnapshot final = takeSnapshot(snapshotSources());
  status::exportFinalMetrics(final, config_.metricsTextfile, config_.metricsPush);
  if (const std::string report = history_.writeReport(final); !report.empty()) {
    spdlog::info("run report: {} (and status.json, attempts.jsonl beside it)", report);
  }
}

}  // namespace ddprun::launcher
