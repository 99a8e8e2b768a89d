#include "launcher/process/spare_rank.hpp"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include "common/error.hpp"
#include "common/handover.hpp"
#include "common/spare_rank.hpp"
#include "launcher/process/console_writer.hpp"
#include "launcher/process/fork_template.hpp"
#include "launcher/process/output_relay.hpp"
#include "launcher/process/terminal.hpp"
#include "launcher/process/worker_exit.hpp"

namespace ddprun::launcher {
namespace {

/// The scheduler state of `pid` (proc(5), /proc/<pid>/stat's third field: R, S, D, T stopped, t traced, Z, ...);
/// '?' when it cannot be read.
char processState(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(in, stat);
  const auto close = stat.rfind(')');  // the command name may hold spaces and parentheses
  return close != std::string::npos && close + 2 < stat.size() ? stat[close + 2] : '?';
}

}  // namespace

SpareRank::SpareRank(boost::asio::io_context& io, ChildReaper& reaper, OrphanGuard& guard)
    : io_(io), reaper_(reaper), guard_(guard) {}

SpareRank::~SpareRank() { discard(); }

void SpareRank::discard() {
  if (pid_ > 0) {
    reaper_.forget(pid_);
    guard_.untrack(pid_);
    ::kill(-pid_, SIGKILL);  // its own process group, as every forked rank's
    pid_ = -1;
  }
  if (socket_ >= 0) ::close(socket_);
  socket_ = -1;
}

void SpareRank::prepare(ForkTemplate& forkServer, const std::map<std::string, std::string>& env) {
  if (pid_ > 0 || !forkServer.ready()) return;
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
    spdlog::warn("spare rank: socketpair: {}; replacements fork a new process", std::strerror(errno));
    return;
  }
  auto spareEnv = env;
  spareEnv[kSpareRankEnv] = "1";
  try {
    const OutputChannel out = openPipe();
    output_ =
        std::make_shared<OutputRelay>(io_, out.readEnd, false, &consoleErr(), ConsoleWriter::kSelf, "[spare]:", "");
    try {
      pid_ = forkServer.fork(spareEnv, pair[1], out.writeEnd, out.writeEnd, false);
    } catch (...) {
      ::close(out.writeEnd);
      output_->cancel();
      throw;
    }
    ::close(out.writeEnd);
  } catch (const std::exception& e) {
    ::close(pair[0]);
    ::close(pair[1]);
    output_.reset();
    spdlog::warn("spare rank: {}; replacements fork a new process", e.what());
    return;
  }
  ::close(pair[1]);
  socket_ = pair[0];
  output_->start();
  guard_.track(pid_);
  reaper_.watch(pid_, [this, pid = pid_](ExitStatus status) {
    if (pid != pid_) return;
    guard_.untrack(pid_);
    pid_ = -1;
    if (socket_ >= 0) ::close(socket_);
    socket_ = -1;
    spdlog::warn(
        "spare rank (pid {}) ended before it was claimed ({}); replacements fork a new process", pid,
        status.signal != 0 ? "killed by " + signalName(status.signal) : "exit code " + std::to_string(status.exitCode));
  });
  spdlog::debug("spare rank forked (pid {}); it waits to replace a failed rank", pid_);
}

pid_t SpareRank::claim(const std::map<std::string, std::string>& env, int stdinFd, int stdoutFd, int stderrFd) {
  if (pid_ <= 0) throw Error("no spare rank is waiting");
  // A spare someone stopped (kill -STOP, a debugger) would take the claim and hold the new group up until the
  // collective timeout; one that has just died would fail as the replacement. Either is discarded here instead.
  const pid_t spare = pid_;
  const char state = processState(spare);
  const bool stopped = state == 'T' || state == 't';
  if (stopped || hasExited(spare)) {
    discard();
    throw Error("the spare rank (pid " + std::to_string(spare) + ") " +
                (stopped ? "is stopped (SIGSTOP, or a debugger holds it)" : "has ended") + "; not claimed");
  }
  if (sendHandover(socket_, "claim\n", env, stdinFd, stdoutFd, stderrFd) < 0) {
    const int sendError = errno;
    discard();
    throw Error("the spare rank (pid " + std::to_string(spare) +
                ") did not take the claim: " + std::strerror(sendError));
  }
  reaper_.forget(spare);
  guard_.untrack(spare);
  ::close(socket_);  // it has its message; closing our end does not end a claimed spare
  socket_ = -1;
  pid_ = -1;
  lastClaimed_ = spare;
  return spare;
}

}  // namespace ddprun::launcher
