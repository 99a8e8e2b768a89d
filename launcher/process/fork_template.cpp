#include "launcher/process/fork_template.hpp"

#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "common/error.hpp"
#include "common/forkserver.hpp"
#include "common/handover.hpp"
#include "launcher/process/console_writer.hpp"
#include "launcher/process/output_relay.hpp"
#include "launcher/process/terminal.hpp"
#include "launcher/process/worker_exit.hpp"

namespace ddprun::launcher {
namespace asio = boost::asio;

namespace {

/// The descriptor number the template finds its socket at.
constexpr int kTemplateSocketFd = 3;
/// How long one fork request may take.
constexpr int kForkTimeoutMs = 10000;

/// poll(2) for reading, restarted after signals (SIGCHLD arrives often), up to `timeoutMs` in all.
bool waitReadable(int fd, int timeoutMs) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd wait{fd, POLLIN, 0};
    const int n = ::poll(&wait, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
    if (n == 1) return true;
    if (n == 0 || (n < 0 && errno != EINTR)) return false;
  }
}

std::string receiveText(int fd) {
  char buffer[4096];
  const ssize_t n = ::recv(fd, buffer, sizeof buffer, MSG_DONTWAIT);
  return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : std::string();
}

}  // namespace

ForkTemplate::ForkTemplate(asio::io_context& io, ChildReaper& reaper, OrphanGuard& guard)
    : io_(io), reaper_(reaper), guard_(guard), socket_(io), readyTimer_(io) {}

ForkTemplate::~ForkTemplate() {
  boost::system::error_code ec;
  socket_.close(ec);  // the template sees the end of the connection and exits
  readyTimer_.cancel();
  if (pid_ > 0 && !exited_) {
    reaper_.forget(pid_);
    ::kill(-pid_, SIGKILL);
  }
}

void ForkTemplate::start(const std::vector<std::string>& command, const std::map<std::string, std::string>& env,
                         std::function<void(bool)> onReady) {
  onReady_ = std::move(onReady);
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
    throw Error(std::string("--start-method forkserver: socketpair: ") + std::strerror(errno));
  }
  const OutputChannel out = openPipe();
  const OutputChannel err = openPipe();
  out_ =
      std::make_shared<OutputRelay>(io_, out.readEnd, false, &consoleOut(), ConsoleWriter::kSelf, "[forkserver]:", "");
  err_ =
      std::make_shared<OutputRelay>(io_, err.readEnd, false, &consoleErr(), ConsoleWriter::kSelf, "[forkserver]:", "");
  SpawnSpec spec;
  spec.argv = command;
  spec.env = env;
  spec.env[kForkServerFdEnv] = std::to_string(kTemplateSocketFd);
  spec.stdoutFd = out.writeEnd;
  spec.stderrFd = err.writeEnd;
  spec.passFds = {{pair[1], kTemplateSocketFd}};
  try {
    guard_.start();  // before the template: should the guardian fail to start, nothing runs unguarded
    pid_ = spawnProcess(spec);
  } catch (...) {
    for (int fd : {pair[0], pair[1], out.writeEnd, err.writeEnd}) ::close(fd);
    throw;
  }
  for (int fd : {pair[1], out.writeEnd, err.writeEnd}) ::close(fd);
  socket_.assign(pair[0]);
  guard_.track(pid_);
  out_->start();
  err_->start();
  reaper_.watch(pid_, [this](ExitStatus status) {
    exited_ = true;
    ready_ = false;
    guard_.untrack(pid_);
    const std::string how = status.signal != 0 ? "was killed by " + signalName(status.signal)
                                               : "exited with code " + std::to_string(status.exitCode);
    if (onReady_) {
      finishStart(false, "the template " + how + " before it was ready");
    } else {
      spdlog::warn("--start-method forkserver: the template (pid {}) {}; later ranks start the normal way", pid_, how);
    }
  });
  readyTimer_.expires_after(kReadyTimeout);
  readyTimer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec && onReady_) finishStart(false, "the template was not ready within 300 s");
  });
  awaitReady();
}

void ForkTemplate::awaitReady() {
  socket_.async_wait(asio::posix::stream_descriptor::wait_read, [this](const boost::system::error_code& ec) {
    if (ec || !onReady_) return;
    const std::string message = receiveText(socket_.native_handle());
    if (message.rfind("ready", 0) == 0) {
      finishStart(true, "");
    } else if (message.rfind("refuse", 0) == 0) {
      finishStart(false, "the template refused: " + message.substr(7));
    } else if (message.empty()) {
      finishStart(false, "the template closed the connection");
    } else {
      finishStart(false, "the template said '" + message + "'");
    }
  });
}

void ForkTemplate::finishStart(bool ok, const std::string& why) {
  readyTimer_.cancel();
  ready_ = ok;
  if (ok) {
    spdlog::info("--start-method forkserver: template ready (pid {}); ranks are forked from it", pid_);
  } else {
    spdlog::warn("--start-method forkserver: {}; ranks start the normal way", why);
  }
  auto onReady = std::move(onReady_);
  onReady_ = nullptr;
  onReady(ok);
}

void ForkTemplate::killLateRanks() {
  socket_.async_wait(asio::posix::stream_descriptor::wait_read, [this](const boost::system::error_code& ec) {
    if (ec) return;
    const std::string message = receiveText(socket_.native_handle());
    if (message.rfind("forked ", 0) == 0) {
      const pid_t late = static_cast<pid_t>(std::stol(message.substr(7)));
      spdlog::warn("--start-method forkserver: the template forked pid {} too late; killing it", late);
      ::kill(late, SIGKILL);
    }
    if (!message.empty()) killLateRanks();
  });
}

pid_t ForkTemplate::fork(const std::map<std::string, std::string>& env, int stdinFd, int stdoutFd, int stderrFd,
                         bool session) {
  if (!ready_) throw Error("the forkserver template is not ready");
  const int socket = socket_.native_handle();
  const std::string head = std::string("fork\n") + (session ? "session" : "group") + "\n";
  if (sendHandover(socket, head, env, stdinFd, stdoutFd, stderrFd) < 0) {
    ready_ = false;
    throw Error(std::string("the forkserver template does not answer: ") + std::strerror(errno));
  }
  if (!waitReadable(socket, kForkTimeoutMs)) {
    // It may still fork the rank later: whatever it reports from now on is killed, never used.
    ready_ = false;
    killLateRanks();
    throw Error("the forkserver template did not fork within 10 s");
  }
  const std::string reply = receiveText(socket);
  if (reply.rfind("forked ", 0) != 0) {
    if (reply.empty()) ready_ = false;
    throw Error("the forkserver template could not fork: " + (reply.empty() ? "it is gone" : reply));
  }
  return static_cast<pid_t>(std::stol(reply.substr(7)));
}

}  // namespace ddprun::launcher
