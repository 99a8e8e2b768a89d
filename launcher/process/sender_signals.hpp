#pragma once
// Signals delivered with the pid of their sender. boost::asio::signal_set says which signal came but not from
// whom; ddprun needs the sender to tell a signal that Slurm sends to every process of a job step (the workers
// included) from one sent to ddprun alone. The handler (SA_SIGINFO) writes the signal and si_pid to a
// non-blocking self-pipe, which the agent's Asio loop reads: nothing but write(2) runs in signal context.
#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <functional>
#include <string>
#include <vector>

namespace ddprun::launcher {

/// One instance per process (the handler's pipe is process-wide); its signals must not also be in an Asio
/// signal_set. Throws ddprun::Error when the pipe or a handler cannot be installed.
class SenderAwareSignals {
 public:
  /// Called on the io_context's thread, once per delivered signal (signals of one kind sent while the
  /// previous one was pending merge into one, as the kernel does). `sender` is 0 when the kernel sent it.
  using Handler = std::function<void(int signal, pid_t sender)>;

  SenderAwareSignals(boost::asio::io_context& io, const std::vector<int>& signals);
  /// Restores the dispositions the signals had before.
  ~SenderAwareSignals();
  SenderAwareSignals(const SenderAwareSignals&) = delete;
  SenderAwareSignals& operator=(const SenderAwareSignals&) = delete;

  /// Calls `handler` for every signal from now on, until cancel().
  void asyncWait(Handler handler);
  void cancel();

  /// What the handler writes to the pipe.
  struct Record {
    int signal;
    pid_t sender;
  };

 private:
  void readNext();

  std::vector<int> signals_;
  int pipe_[2] = {-1, -1};
  boost::asio::posix::stream_descriptor reader_;
  Handler handler_;
  Record record_{};
};

/// The name of process `pid` (/proc/<pid>/comm, at most 15 characters), "" when it is gone or unreadable.
std::string processName(pid_t pid);

}  // namespace ddprun::launcher
