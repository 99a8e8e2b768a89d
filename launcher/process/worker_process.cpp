#include "launcher/process/worker_process.hpp"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/error.hpp"
#include "launcher/process/fork_template.hpp"
#include "launcher/process/numa_binding.hpp"
#include "launcher/process/output_relay.hpp"
#include "launcher/process/spare_rank.hpp"
#include "launcher/process/terminal.hpp"

namespace ddprun::launcher {
namespace asio = boost::asio;

namespace {

/// Closes a descriptor at scope exit: the worker's ends of its channels once it is started (or failed).
struct FdCloser {
  int fd = -1;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

/// --numa-binding for a rank that was not spawned (forked from the template, or a claimed spare): its CPUs are
/// set from here (its memory policy cannot be).
void restrictToCpus(pid_t pid, const std::vector<int>& cpus) {
  if (!cpus.empty() && !setCpuAffinity(pid, cpus)) {
    spdlog::warn("--numa-binding: cannot restrict pid {} to CPUs {}", pid, formatCpuList(cpus));
  }
}

}  // namespace

std::shared_ptr<OutputRelay> WorkerProcess::relay(asio::io_context& io, bool toConsole, const std::string& file,
                                                  int consoleFd, const WorkerLaunch& launch, int& childFd) {
  childFd = -1;
  const bool isStdout = consoleFd == STDOUT_FILENO;
  const auto& filters = isStdout ? launch.output.stdoutFilters : launch.output.stderrFilters;
  // stderr is relayed even when it is neither shown nor kept: a hang's Python tracebacks come that way.
  if (!toConsole && file.empty() && isStdout && filters.empty()) return nullptr;  // /dev/null
  const bool terminal = toConsole && file.empty() && launch.output.allowTerminal && isTerminal(consoleFd);
  const OutputChannel channel =
      terminal ? openPseudoTerminal(consoleFd, static_cast<int>(visibleWidth(launch.output.prefix))) : openPipe();
  childFd = channel.writeEnd;
  ConsoleWriter* console = nullptr;
  if (toConsole) console = consoleFd == STDOUT_FILENO ? &consoleOut() : &consoleErr();
  std::shared_ptr<OutputRelay> relay;
  try {
    relay = std::make_shared<OutputRelay>(io, channel.readEnd, channel.isTerminal, console, launch.source,
                                          launch.output.prefix, file);
  } catch (...) {
    ::close(channel.readEnd);
    throw;
  }
  relay->duplicateLines(filters, isStdout ? launch.output.stdoutFilteredFile : launch.output.stderrFilteredFile);
  return relay;
}

pid_t WorkerProcess::start(const SpawnSpec& spec, ForkTemplate* forkServer, SpareRank* spare) {
  if (spare != nullptr && spare->ready() && !spec.newSession) {
    try {
      const pid_t pid = spare->claim(spec.env, spec.stdinFd, spec.stdoutFd, spec.stderrFd);
      restrictToCpus(pid, spec.cpus);
      return pid;
    } catch (const Error& e) {
      spdlog::warn("{}; this rank is forked instead", e.what());
    }
  }
  if (forkServer != nullptr && forkServer->ready()) {
    try {
      const pid_t pid = forkServer->fork(spec.env, spec.stdinFd, spec.stdoutFd, spec.stderrFd, spec.newSession);
      restrictToCpus(pid, spec.cpus);
      return pid;
    } catch (const Error& e) {
      spdlog::warn("--start-method forkserver: {}; this rank starts the normal way", e.what());
    }
  }
  return spawnProcess(spec);
}

WorkerProcess::WorkerProcess(asio::io_context& io, ChildReaper& reaper, const WorkerLaunch& launch, ExitCallback onExit)
    : io_(io), reaper_(reaper) {
  FdCloser childOut, childErr;
  out_ = relay(io, launch.output.stdoutToConsole, launch.output.stdoutFile, STDOUT_FILENO, launch, childOut.fd);
  err_ = relay(io, launch.output.stderrToConsole, launch.output.stderrFile, STDERR_FILENO, launch, childErr.fd);
  SpawnSpec spec;
  spec.argv = launch.command;
  spec.env = launch.env;
  spec.cpus = launch.cpus;
  spec.memoryNode = launch.memoryNode;
  spec.stdoutFd = childOut.fd;
  spec.stderrFd = childErr.fd;
  if (launch.inheritStdin) {
    spec.stdinFd = STDIN_FILENO;
    spec.newSession = isTerminal(STDIN_FILENO);
    terminalMode_ = SavedTerminalMode::of(STDIN_FILENO);
  }
  try {
    pid_ = start(spec, launch.forkServer, launch.spare);
  } catch (const Error& e) {
    if (out_) out_->cancel();
    if (err_) err_->cancel();
    throw Error(std::string("cannot start worker ") + e.what());
  }
  if (out_) out_->start();
  if (err_) {
    err_->keepTail();
    err_->start();
  }
  reaper_.watch(pid_, [this, onExit = std::move(onExit)](ExitStatus status) {
    exited_ = true;
    if (terminalMode_) terminalMode_->restore();
    WorkerExit exit;
    exit.exitCode = status.exitCode;
    exit.signal = status.signal;
    exit.when = std::chrono::system_clock::now();
    afterStderrRead([this, onExit, exit] {
      exitDelivered_ = true;
      onExit(exit);
    });
  });
}

void WorkerProcess::afterStderrRead(std::function<void()> done, int turn) {
  // The loop runs handlers in the order they were queued: once the pipe is empty, a handler posted now runs after
  // the relay's read of its last bytes.
  constexpr int kSettleTurns = 16;
  const bool unread = err_ && !err_->held() && err_->unreadBytes() > 0;
  asio::post(io_, [this, alive = std::weak_ptr<bool>(alive_), done = std::move(done), turn, unread]() mutable {
    if (alive.expired()) return;
    if (unread && turn < kSettleTurns) {
      afterStderrRead(std::move(done), turn + 1);
      return;
    }
    done();
  });
}

std::string WorkerProcess::stderrTail() const { return err_ ? err_->tailText() : ""; }

WorkerProcess::~WorkerProcess() {
  if (pid_ > 0 && !exited_) {
    reaper_.forget(pid_);
    ::kill(-pid_, SIGKILL);
  }
  // Relays of exited workers read on to the end of their stream (and then go); a killed one has no more.
}

void WorkerProcess::signalGroup(int signal) {
  if (pid_ <= 0) return;
  // The group id stays reserved while any member lives (a zombie leader included), so this cannot hit an
  // unrelated group.
  if (::kill(-pid_, signal) != 0 && !exited_) ::kill(pid_, signal);
}

bool WorkerProcess::groupAlive() const { return pid_ > 0 && ::kill(-pid_, 0) == 0; }

bool WorkerProcess::exitPending() const { return !exitDelivered_ && pid_ > 0 && (exited_ || hasExited(pid_)); }

std::chrono::steady_clock::time_point WorkerProcess::lastOutput() const {
  std::chrono::steady_clock::time_point last{};
  if (out_) last = std::max(last, out_->lastOutput());
  if (err_) last = std::max(last, err_->lastOutput());
  return last;
}

void WorkerProcess::copyStderrTo(int fd) { err_->copyTo(fd); }

bool WorkerProcess::stderrEnded() const { return err_->ended(); }

bool WorkerProcess::outputEnded() const {
  return (out_ == nullptr || out_->ended()) && (err_ == nullptr || err_->ended());
}

void WorkerProcess::updateWindowSize(int fromTerminal) {
  for (auto* relay : {out_.get(), err_.get()}) {
    if (relay != nullptr) relay->copyWindowSizeFrom(fromTerminal);
  }
}

bool WorkerProcess::sawAddressInUse() const { return err_ && err_->sawAddressInUse(); }

bool WorkerProcess::outputHeld() const { return (out_ && out_->held()) || (err_ && err_->held()); }

double WorkerProcess::outputHeldSeconds() const {
  return std::max(out_ ? out_->heldSeconds() : 0.0, err_ ? err_->heldSeconds() : 0.0);
}

std::string WorkerProcess::takeUnshownOutput() {
  std::string text;
  for (auto* relay : {&out_, &err_}) {
    if (*relay != nullptr) text += (*relay)->takeUnshown();
  }
  return text;
}

}  // namespace ddprun::launcher
