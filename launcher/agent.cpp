#include "launcher/agent.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>

#include "common/env.hpp"
#include "common/error.hpp"
#include "common/net_address.hpp"

namespace ddprun::launcher {
namespace asio = boost::asio;
namespace fs = std::filesystem;

namespace {

std::string hostName() {
  char name[256] = {0};
  ::gethostname(name, sizeof name - 1);
  return name;
}

/// A port that was free on loopback a moment ago (the same race torchrun accepts for this case).
int freeLoopbackPort() {
  asio::io_context io;
  asio::ip::tcp::acceptor probe(io, {asio::ip::make_address("127.0.0.1"), 0});
  return probe.local_endpoint().port();
}

std::string makeLogRoot(const LaunchConfig& config) {
  if (!config.logDir.empty()) return (fs::path(config.logDir) / config.rdzvId).string();
  std::string pattern = (fs::temp_directory_path() / ("ddprun-" + config.rdzvId + "-XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr) throw Error("cannot create a temporary log dir " + pattern);
  return pattern;
}

}  // namespace

Agent::Agent(LaunchConfig config)
    : config_(std::move(config)), signals_(io_, SIGINT, SIGTERM, SIGHUP), killTimer_(io_) {
  signals_.add(SIGQUIT);
  inheritedOmpThreads_ = getEnv("OMP_NUM_THREADS").has_value();
}

Agent::~Agent() = default;

void Agent::startStore() {
  if (!config_.useAgentStore) {
    // Rank 0's worker hosts the store (torch's env:// rules); with --standalone on a port free now.
    masterAddr_ = config_.standalone ? "127.0.0.1" : config_.masterAddr;
    masterPort_ = config_.standalone ? freeLoopbackPort() : config_.masterPort;
    spdlog::info("no agent store: rank 0 hosts the store at {}:{}", masterAddr_, masterPort_);
    return;
  }
  rendezvous::StoreServerOptions options;
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
  store_ = std::make_unique<rendezvous::StoreServer>(io_, options);
  masterPort_ = store_->port();
  spdlog::info("store listening on {}:{} (workers use MASTER_ADDR={} MASTER_PORT={})", options.host, masterPort_,
               masterAddr_, masterPort_);
}

std::string Agent::attemptDir() const {
  return (fs::path(logRoot_) / ("attempt_" + std::to_string(restartCount_))).string();
}

void Agent::startAttempt() {
  const auto started = std::chrono::steady_clock::now();
  const int nproc = config_.nproc;
  const auto command = workerCommand(config_);
  slots_.clear();
  slots_.resize(static_cast<size_t>(nproc));
  failures_.clear();
  for (int local = 0; local < nproc; ++local) {
    Slot& slot = slots_[static_cast<size_t>(local)];
    slot.assignment.localRank = local;
    slot.assignment.groupRank = config_.nodeRank;
    slot.assignment.globalRank = config_.nodeRank * nproc + local;
    slot.assignment.roleRank = slot.assignment.globalRank;
    slot.assignment.localWorldSize = nproc;
    slot.assignment.worldSize = config_.minNodes * nproc;
    slot.assignment.roleWorldSize = slot.assignment.worldSize;
    slot.assignment.groupWorldSize = config_.minNodes;

    const fs::path dir = fs::path(attemptDir()) / std::to_string(local);
    try {
      fs::remove_all(dir);  // a reused attempt number starts clean, as in torchelastic
      fs::create_directories(dir);
    } catch (const fs::filesystem_error& e) {
      throw Error("cannot prepare the worker log dir " + dir.string() + " (--log-dir): " + e.code().message());
    }
    slot.errorFile = (dir / "error.json").string();
    AttemptInfo attempt{restartCount_, masterAddr_, masterPort_, config_.useAgentStore, slot.errorFile};

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
    finish(0);
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
    finish(128 + stopSignal_);
    return;
  }
  // A failure: the others were stopped on purpose and are not failures themselves (torchelastic).
  if (restartCount_ < config_.maxRestarts) {
    ++restartCount_;
    spdlog::warn("worker group failed; restarting it (attempt {} of at most {} restarts)", restartCount_,
                 config_.maxRestarts);
    // Posted: we are inside a worker's exit handler, and startAttempt destroys that worker.
    asio::post(io_, [this] {
      try {
        startAttempt();
      } catch (const std::exception& e) {
        spdlog::error("{}", e.what());
        finish(1);
      }
    });
    return;
  }
  std::fputs(formatFailureSummary(config_.program, failures_, hostName()).c_str(), stderr);
  finish(1);
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
      spdlog::warn("received {}; forwarding it to the workers (SIGKILL after {} s)", signalName(signal),
                   config_.stopTimeout);
      beginStop(StopReason::kSignal, signal);
    }
    waitForSignals();
  });
}

void Agent::finish(int exitCode) {
  exitCode_ = exitCode;
  signals_.cancel();
  killTimer_.cancel();
  if (store_) store_->stop();
  io_.stop();
}

int Agent::run() {
  guard_ = std::make_unique<OrphanGuard>();  // before any thread or worker exists
  logRoot_ = makeLogRoot(config_);
  startStore();
  waitForSignals();
  startAttempt();
  io_.run();
  if (exitCode_ == 0 && config_.logDir.empty()) {
    std::error_code ec;
    fs::remove_all(logRoot_, ec);  // a temp dir of a successful run holds nothing worth keeping
  }
  return exitCode_;
}

}  // namespace ddprun::launcher
