#pragma once
// Test helper: runs a program with extra environment variables and a hard timeout (Boost.Process),
// capturing stdout and stderr to files, so a hung child can never hang the test suite.
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ddprun::test {

/// How a child ended.
struct ChildResult {
  int exitCode = -1;      ///< exit status when it exited, -1 otherwise
  int signal = 0;         ///< terminating signal, 0 when it exited
  bool timedOut = false;  ///< killed by us after the timeout
  std::string output;     ///< stdout followed by stderr
};

/// A started child. The destructor kills it (SIGKILL) if it is still running.
class ChildProcess {
 public:
  ChildProcess(const std::string& program, const std::vector<std::string>& args,
               const std::map<std::string, std::string>& env);
  ~ChildProcess();
  ChildProcess(ChildProcess&&) noexcept;
  ChildProcess& operator=(ChildProcess&&) = delete;

  int pid() const;
  bool running();
  /// Sends `signal` to the child.
  void sendSignal(int signal);
  /// What the child has written so far: stdout followed by stderr.
  std::string outputSoFar() const;
  /// Waits up to `timeout`; on expiry kills the child and marks the result timedOut.
  ChildResult wait(std::chrono::milliseconds timeout);

 private:
  struct Impl;
  Impl* impl_;
};

/// Runs the program to completion (or the timeout) and returns how it ended.
ChildResult runProcess(const std::string& program, const std::vector<std::string>& args,
                       const std::map<std::string, std::string>& env = {},
                       std::chrono::milliseconds timeout = std::chrono::seconds(120));

/// Starts `nproc` ranks of `program` with torchrun's environment on a free loopback port and waits for
/// all of them. `extraEnv` is added to every rank's environment.
std::vector<ChildResult> runRanks(int nproc, const std::string& program, const std::vector<std::string>& args,
                                  const std::map<std::string, std::string>& extraEnv = {},
                                  std::chrono::milliseconds timeout = std::chrono::seconds(180));

/// The Python with torch that tests run: $DDPRUN_PYTHON, else /usr/bin/python3 (Debian's python3-torch;
/// tools/gpu-check.sh points it at the GPU machine's torch 2.x).
std::string pythonExe();

/// A TCP port that was free on 127.0.0.1 a moment ago.
int freePort();

/// A fresh empty directory under the system temp dir; removed by the caller (or left for inspection).
std::string makeTempDir(const std::string& tag);

/// The whole content of a file ("" when missing).
std::string readFile(const std::string& path);

/// The fields of a /proc/<pid>/stat (or task stat) line after "pid (comm)": element 0 is field 3 (the state), 1 the
/// ppid, 16 the nice value (proc(5)). comm may hold spaces and parentheses, so they count from the last ')'. Empty
/// when `stat` has none (the process is gone).
std::vector<std::string> procStatFields(const std::string& stat);

}  // namespace ddprun::test
