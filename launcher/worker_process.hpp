#pragma once
// One worker process: spawned with Boost.Process into its own process group, with PR_SET_PDEATHSIG so it
// dies with ddprun even on SIGKILL; its stdout/stderr go to the console with a "[rank<N>]:" prefix, to
// files, or both (torchrun's --redirects/--tee); its exit is reported through the Asio loop (SIGCHLD).
#include <boost/asio.hpp>
#include <boost/process.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ddprun::launcher {

/// How a worker ended.
struct WorkerExit {
  int exitCode = 0;  ///< exit status, or 0 when killed by a signal
  int signal = 0;    ///< terminating signal, 0 when it exited
  std::chrono::system_clock::time_point when;
  bool succeeded() const { return signal == 0 && exitCode == 0; }
};

/// Where a worker's output goes.
struct OutputSpec {
  std::string prefix;        ///< console line prefix, e.g. "[rank0]:"
  std::string stdoutFile;    ///< empty: no file
  std::string stderrFile;
  bool stdoutToConsole = true;
  bool stderrToConsole = true;
};

class WorkerProcess {
 public:
  using ExitCallback = std::function<void(const WorkerExit&)>;

  /// Starts `command` (command[0] searched on PATH when it has no '/') with ddprun's environment plus
  /// `env`. `onExit` runs on `io`'s thread. Throws ddprun::Error when the program cannot be started.
  WorkerProcess(boost::asio::io_context& io, const std::vector<std::string>& command,
                const std::map<std::string, std::string>& env, const OutputSpec& output, ExitCallback onExit);
  ~WorkerProcess();

  int pid() const { return pid_; }
  bool running() const { return !exited_; }
  /// Sends `signal` to the worker's whole process group (its children too), also after the worker itself
  /// has exited while others of its group live on.
  void signalGroup(int signal);
  /// True while any process of the worker's group is alive.
  bool groupAlive() const;

 private:
  struct Stream;
  void pump(std::shared_ptr<Stream> stream);

  int pid_ = -1;
  bool exited_ = false;
  std::unique_ptr<boost::process::child> child_;
  std::shared_ptr<Stream> out_, err_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

/// "SIGTERM", "SIGKILL", … for log lines and failure summaries.
std::string signalName(int signal);

}  // namespace ddprun::launcher
