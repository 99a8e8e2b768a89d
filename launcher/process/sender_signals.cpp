#include "launcher/process/sender_signals.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <boost/asio/read.hpp>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <string>

#include "common/error.hpp"

namespace ddprun::launcher {
namespace {

int gWriteEnd = -1;                // the pipe the handler writes to; one instance per process
struct sigaction gPrevious[NSIG];  // what each signal did before

void onSignal(int signal, siginfo_t* info, void*) {
  const int savedErrno = errno;
  const SenderAwareSignals::Record record{signal, info != nullptr ? info->si_pid : 0};
  // At most PIPE_BUF bytes: atomic. A full pipe (thousands of unread signals) drops this one rather than block.
  [[maybe_unused]] ssize_t n = ::write(gWriteEnd, &record, sizeof record);
  errno = savedErrno;
}

}  // namespace

SenderAwareSignals::SenderAwareSignals(boost::asio::io_context& io, const std::vector<int>& signals)
    : signals_(signals), reader_(io) {
  if (gWriteEnd != -1) throw Error("SenderAwareSignals: only one instance per process");
  if (::pipe2(pipe_, O_CLOEXEC | O_NONBLOCK) != 0) throw Error(std::string("pipe2: ") + std::strerror(errno));
  static_assert(sizeof(Record) <= PIPE_BUF);
  gWriteEnd = pipe_[1];
  reader_.assign(pipe_[0]);
  for (int signal : signals_) {
    struct sigaction action {};
    action.sa_sigaction = onSignal;
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    ::sigemptyset(&action.sa_mask);
    if (::sigaction(signal, &action, &gPrevious[signal]) != 0) {
      throw Error("sigaction(" + std::to_string(signal) + "): " + std::strerror(errno));
    }
  }
}

SenderAwareSignals::~SenderAwareSignals() {
  for (int signal : signals_) ::sigaction(signal, &gPrevious[signal], nullptr);
  boost::system::error_code ignored;
  reader_.close(ignored);
  ::close(pipe_[1]);
  gWriteEnd = -1;
}

void SenderAwareSignals::asyncWait(Handler handler) {
  handler_ = std::move(handler);
  readNext();
}

void SenderAwareSignals::cancel() {
  boost::system::error_code ignored;
  reader_.cancel(ignored);
}

void SenderAwareSignals::readNext() {
  boost::asio::async_read(reader_, boost::asio::buffer(&record_, sizeof record_),
                          [this](const boost::system::error_code& ec, std::size_t) {
                            if (ec) return;
                            handler_(record_.signal, record_.sender);
                            readNext();
                          });
}

std::string processName(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(in, name);
  return name;
}

}  // namespace ddprun::launcher
