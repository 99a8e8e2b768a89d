#include "launcher/agent.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>

#include "common/env.hpp"
#include "common/error.hpp"
#include "common/net_address.hpp"
#include "launcher/local_host.hpp"

namespace ddprun::launcher {
namespace asio = boost::asio;
namespace fs = std::filesystem;

namespace {

/// A port that was free on `host` a moment ago (the same race torchrun accepts for this case).
int freePort(const std::string& host = "127.0.0.1") {
  asio::io_context io;
  asio::ip::tcp::acceptor probe(io, {asio::ip::make_address(host), 0});
  return probe.local_endpoint().port();
}

/// --local-addr may be a name: the store binds the address it resolves to. Throws ConfigError.
std::string resolveLocalAddr(const std::string& localAddr) {
  asio::io_context io;
  boost::system::error_code ec;
  auto results = asio::ip::tcp::resolver(io).resolve(localAddr, "0", ec);
  if (ec || results.empty()) {
    throw ConfigError("--local-addr " + localAddr + ": cannot resolve it to an address of this machine (" +
                      ec.message() + ")");
  }
  return results.begin()->endpoint().address().to_string();
}

std::string describeRound(const rendezvous::RoundAssignment& round) {
  return "round " + std::to_string(round.round) + ": group rank " + std::to_string(round.groupRank) + " of " +
         std::to_string(round.groupWorldSize) + ", ranks " + std::to_string(round.rankOffset) + ".., world size " +
         std::to_string(round.worldSize) + ", MASTER_ADDR=" + round.masterAddr +
         " MASTER_PORT=" + std::to_string(round.masterPort);
}

std::string makeLogRoot(const LaunchConfig& config) {
  if (!config.logDir.empty()) return (fs::path(config.logDir) / config.rdzvId).string();
  std::string pattern = (fs::temp_directory_path() / ("ddprun-" + config.rdzvId + "-XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr) throw Error("cannot create a temporary log dir " + pattern);
  return pattern;
}

}  // namespace

Agent::Agent(LaunchConfig config)
    : config_(std::move(config)), signals_(io_, SIGINT, SIGTERM, SIGHUP), killTimer_(io_), monitorTimer_(io_) {
  signals_.add(SIGQUIT);
  inheritedOmpThreads_ = getEnv("OMP_NUM_THREADS").has_value();
}

Agent::~Agent() = default;

void Agent::startStore() {
  if (!config_.useAgentStore) {
    // Rank 0's worker hosts the store (torch's env:// rules); with --standalone on a port free now.
    masterAddr_ = config_.standalone ? "127.0.0.1" : config_.masterAddr;
    masterPort_ = config_.standalone ? freePort() : config_.masterPort;
    spdlog::info("no agent store: rank 0 hosts the store at {}:{}", masterAddr_, masterPort_);
    return;
  }
  store::StoreServerOptions options;
  if (config_.standalone) {
    // A free loopback port: two standalone jobs on one machine never collide.
    options.host = "127.0.0.1";
    options.port = 0;
    masterAddr_ = "127.0.0.1";
  } else {
    options.host = isLoopbackHost(config_.masterAddr) ? "127.0.0.1" : "0.0.0.0";
    options.port = static_cast<uint16_t>(config_.masterPort);
    masterAddr_ = config_.masterAddr;
  }
  store_ = std::make_unique<store::StoreServer>(io_, options);
  masterPort_ = store_->port();
  spdlog::info("store listening on {}:{} (workers use MASTER_ADDR={} MASTER_PORT={})", options.host, masterPort_,
               masterAddr_, masterPort_);
}

std::string Agent::attemptDir() const {
  return (fs::path(logRoot_) / ("attempt_" + std::to_string(restartCount_))).string();
}

void Agent::startAttempt(const rendezvous::RoundAssignment& round) {
  const auto started = std::chrono::steady_clock::now();
  phase_ = Phase::kRunning;
  const int nproc = config_.nproc;
  const auto command = workerCommand(config_);
  slots_.clear();
  slots_.resize(static_cast<size_t>(nproc));
  failures_.clear();
  for (int local = 0; local < nproc; ++local) {
    Slot& slot = slots_[static_cast<size_t>(local)];
    slot.assignment.localRank = local;
    slot.assignment.groupRank = round.groupRank;
    slot.assignment.globalRank = round.rankOffset + local;
    slot.assignment.roleRank = slot.assignment.globalRank;
    slot.assignment.localWorldSize = nproc;
    slot.assignment.worldSize = round.worldSize;
    slot.assignment.roleWorldSize = slot.assignment.worldSize;
    slot.assignment.groupWorldSize = round.groupWorldSize;

    const fs::path dir = fs::path(attemptDir()) / std::to_string(local);
    try {
      fs::remove_all(dir);  // a reused attempt number starts clean, as in torchelastic
      fs::create_directories(dir);
    } catch (const fs::filesystem_error& e) {
      throw Error("cannot prepare the worker log dir " + dir.string() + " (--log-dir): " + e.code().message());
    }
    slot.errorFile = (dir / "error.json").string();
    // Workers key their store traffic by TORCHELASTIC_RESTART_COUNT (/worker/attempt_N), so every node of a
    // round must give the same number: nodes restart for different reasons (a failure here, a membership
    // change there), so a multi-node job uses the round, which all of them share.
    const int attemptNumber = session_ ? static_cast<int>(round.round) : restartCount_;
    AttemptInfo attempt{attemptNumber, round.masterAddr, round.masterPort, config_.useAgentStore, slot.errorFile};

    OutputSpec output;
    output.prefix = "[rank" + std::to_string(slot.assignment.globalRank) + "]:";
    const int redirect = maskFor(config_.redirects, local);
    const int tee = maskFor(config_.tee, local);
    const bool shown = config_.localRanksFilter.empty() ||
                       std::find(config_.localRanksFilter.begin(), config_.localRanksFilter.end(), local) !=
                           config_.localRanksFilter.end();
    if ((redirect | tee) & 1) output.stdoutFile = (dir / "stdout.log").string();
    if ((redirect | tee) & 2) output.stderrFile = (dir / "stderr.log").string();
    output.stdoutToConsole = shown && !(redirect & 1 && !(tee & 1));
    output.stderrToConsole = shown && !(redirect & 2 && !(tee & 2));

    slot.process = std::make_unique<WorkerProcess>(
        io_, command, workerEnvironment(config_, slot.assignment, attempt, inheritedOmpThreads_), output,
        [this, local](const WorkerExit& exit) { onWorkerExit(static_cast<size_t>(local), exit); });
    guard_->track(slot.process->pid());
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  if (restartCount_ == 0) {
    spdlog::info("started {} workers ({}) in {:.1f} ms", nproc, command[0], ms);
  } else {
    const double sinceFailure =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - failureSeen_).count();
    spdlog::info("attempt {}: restarted {} workers, {:.1f} ms after the failure was seen", restartCount_, nproc,
                 sinceFailure);
  }
}

bool Agent::allExited() const {
  return std::all_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.exit.has_value(); });
}

void Agent::onWorkerExit(size_t localRank, const WorkerExit& exit) {
  if (finished_) return;
  Slot& slot = slots_[localRank];
  slot.exit = exit;
  // The worker is reaped; its group may live on (grandchildren), so a later SIGKILL to ddprun must
  // still reach it: keep it tracked unless the whole group is gone.
  if (!slot.process->groupAlive()) guard_->untrack(slot.process->pid());
  const int rank = slot.assignment.globalRank;
  if (stopReason_ != StopReason::kNone) {
    // A worker that failed on its own (it wrote an error file) before our signal reached it is a
    // failure too: it may even be the root cause (torchelastic records these as well).
    if (stopReason_ == StopReason::kFailure && !exit.succeeded() && exit.signal != stopSignal_ &&
        exit.signal != SIGKILL) {
      failures_.push_back(describeFailure(rank, static_cast<int>(localRank), slot.process->pid(), exit, slot.errorFile));
    }
    if (allExited()) onAllStopped();
    return;
  }
  if (!exit.succeeded()) {
    failureSeen_ = std::chrono::steady_clock::now();
    if (exit.signal != 0) {
      spdlog::warn("rank {} (pid {}) was killed by {}", rank, slot.process->pid(), signalName(exit.signal));
    } else {
      spdlog::warn("rank {} (pid {}) exited with code {}", rank, slot.process->pid(), exit.exitCode);
    }
    failures_.push_back(describeFailure(rank, static_cast<int>(localRank), slot.process->pid(), exit, slot.errorFile));
    beginStop(StopReason::kFailure, SIGTERM);
    return;
  }
  if (allExited()) {
    spdlog::info("all {} workers exited 0", slots_.size());
    finishNode(rendezvous::NodeOutcome::kSucceeded, 0);
  }
}

void Agent::beginStop(StopReason reason, int signal) {
  stopReason_ = reason;
  stopSignal_ = signal;
  for (auto& slot : slots_) slot.process->signalGroup(signal);  // exited workers' children too
  if (allExited()) {
    onAllStopped();
    return;
  }
  killTimer_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(config_.stopTimeout)));
  killTimer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    for (auto& slot : slots_) {
      if (!slot.exit) {
        spdlog::warn("rank {} did not stop within {} s of {}; sending SIGKILL", slot.assignment.globalRank,
                     config_.stopTimeout, signalName(stopSignal_));
        slot.process->signalGroup(SIGKILL);
      }
    }
  });
}

void Agent::onAllStopped() {
  killTimer_.cancel();
  // Every worker has exited; whatever they started in their groups goes too, before anything new starts.
  for (auto& slot : slots_) {
    if (slot.process->groupAlive()) slot.process->signalGroup(SIGKILL);
    guard_->untrack(slot.process->pid());
  }
  const StopReason reason = stopReason_;
  stopReason_ = StopReason::kNone;
  if (reason == StopReason::kSignal) {
    spdlog::info("workers stopped; exiting on {}", signalName(stopSignal_));
    if (session_) session_->cancel();  // a join in progress gives up (and leaves its round) at once
    finishNode(rendezvous::NodeOutcome::kStopped, 128 + stopSignal_);
    return;
  }
  if (reason == StopReason::kBackendLost) {
    finish(1);
    return;
  }
  if (reason == StopReason::kMembershipChange) {
    // As in torchelastic, a membership change does not use up a restart.
    spdlog::info("workers stopped for the membership change; starting a new rendezvous round");
    asio::post(io_, [this] { beginRendezvous(); });
    return;
  }
  // A failure: the others were stopped on purpose and are not failures themselves (torchelastic).
  if (restartCount_ < config_.maxRestarts) {
    ++restartCount_;
    spdlog::warn("worker group failed; restarting it (attempt {} of at most {} restarts)", restartCount_,
                 config_.maxRestarts);
    // Posted: we are inside a worker's exit handler, and startAttempt destroys that worker.
    asio::post(io_, [this] {
      if (finished_) return;
      if (session_) {
        beginRendezvous();  // every restart is a new round (torchelastic's _restart_workers)
        return;
      }
      try {
        startAttempt(singleNodeRound());
      } catch (const std::exception& e) {
        spdlog::error("{}", e.what());
        finish(1);
      }
    });
    return;
  }
  std::fputs(formatFailureSummary(config_.program, failures_, hostName()).c_str(), stderr);
  finishNode(rendezvous::NodeOutcome::kFailed, 1);
}

void Agent::waitForSignals() {
  signals_.async_wait([this](const boost::system::error_code& ec, int signal) {
    if (ec) return;
    if (stopReason_ == StopReason::kSignal) {
      spdlog::warn("second {}: killing the workers now", signalName(signal));
      for (auto& slot : slots_) {
        if (!slot.exit) slot.process->signalGroup(SIGKILL);
      }
    } else {
      if (allExited()) {
        spdlog::warn("received {}; no workers running, stopping", signalName(signal));
      } else {
        spdlog::warn("received {}; forwarding it to the workers (SIGKILL after {} s)", signalName(signal),
                     config_.stopTimeout);
      }
      beginStop(StopReason::kSignal, signal);
    }
    waitForSignals();
  });
}

void Agent::finish(int exitCode) {
  finished_ = true;
  exitCode_ = exitCode;
  if (session_) session_->cancel();
  signals_.cancel();
  killTimer_.cancel();
  monitorTimer_.cancel();
  if (store_) store_->stop();
  io_.stop();
}

rendezvous::RoundAssignment Agent::singleNodeRound() const {
  rendezvous::RoundAssignment round;
  round.worldSize = config_.nproc;
  round.masterAddr = masterAddr_;
  round.masterPort = masterPort_;
  return round;
}

int Agent::prepareRoundStore() {
  // Each round gets a fresh store, so no key of an earlier round (or of another membership) leaks in.
  if (store_) {
    store_->stop();
    retiredStores_.push_back(std::move(store_));
  }
  const std::string bindHost = config_.localAddr.empty() ? "0.0.0.0" : resolveLocalAddr(config_.localAddr);
  if (!config_.useAgentStore) return freePort(bindHost);  // rank 0's worker will bind it
  store::StoreServerOptions options;
  options.host = bindHost;
  options.port = 0;
  try {
    store_ = std::make_unique<store::StoreServer>(io_, options);
  } catch (const store::StoreBindError& e) {
    throw ConfigError("--local-addr " + config_.localAddr + ": the workers' store cannot listen there (" +
                      e.what() + "); give an address of this machine");
  }
  return store_->port();
}

void Agent::beginRendezvous() {
  phase_ = Phase::kRendezvous;
  rendezvous::NodeDescriptor self;
  self.addr = config_.localAddr.empty() ? hostName() : config_.localAddr;
  self.id = self.addr + "_" + std::to_string(::getpid());
  self.nproc = config_.nproc;
  if (config_.mode == RendezvousMode::kDynamic) {
    self.storeAddr = self.addr;  // where the other nodes reach this node
    self.storePort = prepareRoundStore();
  }
  session_->post(
      [this, self](rendezvous::RendezvousHandler& handler) {
        try {
          auto round = handler.next(self, session_->cancelFlag());
          asio::post(io_, [this, round] { onRoundComplete(round); });
        } catch (const rendezvous::RendezvousCancelled&) {
          // ddprun is already stopping.
        } catch (const std::exception& e) {
          failRendezvous(e.what());
        }
      },
      [this](const std::string& message) { failRendezvous(message); });
}

void Agent::failRendezvous(const std::string& message) {
  asio::post(io_, [this, message] {
    // A node already on its way out (a signal) ends with its own exit code, not this one.
    if (finished_ || phase_ == Phase::kFinishing) return;
    spdlog::error("{}", message);
    finish(1);
  });
}

void Agent::onRoundComplete(const rendezvous::RoundAssignment& round) {
  if (finished_ || stopReason_ != StopReason::kNone || phase_ != Phase::kRendezvous) return;
  spdlog::info("{}", describeRound(round));
  try {
    startAttempt(round);
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    finish(1);
  }
}

void Agent::scheduleMonitor() {
  monitorTimer_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(config_.monitorInterval)));
  monitorTimer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    if (phase_ == Phase::kRunning && !checkInFlight_) {
      checkInFlight_ = true;
      session_->post(
          [this](rendezvous::RendezvousHandler& handler) {
            try {
              const auto membership = handler.check();
              asio::post(io_, [this, membership] { onMembership(membership); });
            } catch (const std::exception& e) {
              const std::string message = e.what();
              asio::post(io_, [this, message] {
                checkInFlight_ = false;
                if (phase_ == Phase::kFinishing) return;
                spdlog::error("{}; stopping the workers", message);
                beginStop(StopReason::kBackendLost, SIGTERM);
              });
            }
          },
          [](const std::string&) {});
    }
    scheduleMonitor();
  });
}

void Agent::onMembership(rendezvous::Membership membership) {
  checkInFlight_ = false;
  if (finished_ || membership == rendezvous::Membership::kStable) return;
  if (phase_ != Phase::kRunning || stopReason_ != StopReason::kNone) return;
  spdlog::warn("{}; stopping the workers for a new rendezvous round ({} restart(s) left, not used by this)",
               membership == rendezvous::Membership::kNodesWaiting ? "nodes are waiting to join"
                                                                   : "a node left the worker group",
               config_.maxRestarts - restartCount_);
  beginStop(StopReason::kMembershipChange, SIGTERM);
}

void Agent::finishNode(rendezvous::NodeOutcome outcome, int exitCode) {
  if (!session_) {
    finish(exitCode);
    return;
  }
  phase_ = Phase::kFinishing;
  session_->post(
      [this, outcome, exitCode](rendezvous::RendezvousHandler& handler) {
        handler.finish(outcome, session_->cancelFlag());
        asio::post(io_, [this, exitCode] { finish(exitCode); });
      },
      [this, exitCode](const std::string&) { asio::post(io_, [this, exitCode] { finish(exitCode); }); });
}

int Agent::run() {
  guard_ = std::make_unique<OrphanGuard>();  // before any thread or worker exists
  logRoot_ = makeLogRoot(config_);
  waitForSignals();
  if (config_.mode == RendezvousMode::kSingleNode) {
    startStore();
    startAttempt(singleNodeRound());
  } else {
    // Static: node 0's agent serves the one store every round and every worker uses.
    if (config_.mode == RendezvousMode::kStatic && config_.nodeRank == 0) startStore();
    session_ = std::make_unique<RendezvousSession>(config_);
    beginRendezvous();
    scheduleMonitor();
  }
  io_.run();
  // Lines a worker wrote just before it exited can still sit in its pipe when the loop stops: let the
  // output readers finish (they end at EOF; bounded, since a worker's leftover child may hold a pipe open).
  // Every other handler sees finished_ and does nothing.
  io_.restart();
  io_.run_for(std::chrono::milliseconds(500));
  session_.reset();  // joins the rendezvous thread before anything it uses goes away
  if (exitCode_ == 0 && config_.logDir.empty()) {
    std::error_code ec;
    fs::remove_all(logRoot_, ec);  // a temp dir of a successful run holds nothing worth keeping
  }
  return exitCode_;
}

}  // namespace ddprun::launcher
