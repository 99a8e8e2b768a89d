#pragma once
// How a worker ended, and signal names for log lines and failure summaries.
#include <chrono>
#include <string>

namespace ddprun::launcher {

/// How a worker ended.
struct WorkerExit {
  int exitCode = 0;                            ///< exit status, or 0 when killed by a signal
  int signal = 0;                              ///< terminating signal, 0 when it exited
  std::chrono::system_clock::time_point when;  ///< when ddprun saw it
  bool succeeded() const { return signal == 0 && exitCode == 0; }
};

/// "SIGTERM", "SIGKILL", … ("signal 64" for one without a name).
std::string signalName(int signal);

}  // namespace ddprun::launcher
