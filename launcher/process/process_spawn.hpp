#pragma once
// Starting and reaping the processes ddprun supervises: a vfork-style start + exec with exactly the standard streams,
// process group or session, death signal and ptrace permission a worker needs, and exits delivered through
// SIGCHLD on the agent's loop. ddprun's own code rather than Boost.Process: starting and watching processes
// is what the launcher exists for, and every stream kind (inherited stdin, /dev/null, pipe, pseudo-terminal)
// goes through one call.
#include <sys/types.h>

#include <boost/asio.hpp>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ddprun::launcher {

/// What a new process is started with.
struct SpawnSpec {
  std::vector<std::string> argv;           ///< argv[0]: a path, or a name searched on PATH
  std::map<std::string, std::string> env;  ///< set on top of ddprun's own environment
  int stdinFd = -1;                        ///< descriptor to become the child's stdin; -1: /dev/null
  int stdoutFd = -1;                       ///< -1: /dev/null
  int stderrFd = -1;                       ///< -1: /dev/null
  /// A session of its own (setsid) instead of only a process group of its own (setpgid). A worker that
  /// reads ddprun's terminal needs it: a background process group that reads its controlling terminal is
  /// stopped by SIGTTIN, a process in another session has no controlling terminal to be stopped by.
  bool newSession = false;
  /// Further descriptors the child gets: {descriptor in ddprun, number in the child} (e.g. a socket at 3).
  std::vector<std::pair<int, int>> passFds;
  /// PR_SET_PDEATHSIG: SIGKILL when ddprun dies, even by SIGKILL.
  bool dieWithParent = true;
  /// PR_SET_PTRACER: lets ddprun and its children (eu-stack, gdb) attach where Yama's ptrace_scope is 1.
  bool allowParentToTrace = true;
  /// --numa-binding: the CPUs it may run on (empty: all) and the NUMA node its memory prefers (-1: none).
  std::vector<int> cpus;
  int memoryNode = -1;
};

/// Restricts `pid` (0: the caller) to `cpus`; false when the kernel refuses (an offline CPU, say).
bool setCpuAffinity(pid_t pid, const std::vector<int>& cpus);

/// The path exec would run for `name` (searched on PATH when it has no '/', then beside ddprun's own executable), or ""
/// when none is found.
std::string resolveProgram(const std::string& name);

/// Starts `spec` (clone with CLONE_VM | CLONE_VFORK, then exec, as posix_spawn); returns the child's pid, which is also
/// its process group id. Throws ddprun::Error ("'prog' (/path): Exec format error"; callers say what they were
/// starting) ("Exec format error", "No such file or directory") when it cannot start; the failed child is reaped. Only
/// async-signal-safe calls run in the child.
pid_t spawnProcess(const SpawnSpec& spec);

/// How a process ended, from a wait status.
struct ExitStatus {
  int exitCode = 0;  ///< exit status, or 0 when killed by a signal
  int signal = 0;    ///< terminating signal, 0 when it exited
};
ExitStatus decodeWaitStatus(int status);

/// True when `pid` (a child of ddprun) has exited but is not reaped yet; the status stays for the reaper.
bool hasExited(pid_t pid);

/// Delivers the exits of the children ddprun watches, on `io`'s thread, in the order they happened: each watched
/// child's pidfd (pidfd_open(2), Linux 5.3+) becomes readable when it exits, and epoll reports ready descriptors in the
/// order they became ready, where one SIGCHLD for several exits would only say "some children" (and waitpid would
/// then find them in the order they were started). SIGCHLD remains the way for a pid without a pidfd. Only watched
/// pids are reaped: the orphan guard and processes Boost.Process or others wait for are left alone.
class ChildReaper {
 public:
  using ExitCallback = std::function<void(ExitStatus)>;

  explicit ChildReaper(boost::asio::io_context& io);
  ChildReaper(const ChildReaper&) = delete;
  ChildReaper& operator=(const ChildReaper&) = delete;

  /// Calls `onExit` once, on the loop, when `pid` exits (also when it already has).
  void watch(pid_t pid, ExitCallback onExit);
  /// Stops watching `pid` without reaping it.
  void forget(pid_t pid);
  /// For a child subreaper (the forkserver's ranks are adopted): also reaps any other child that ends (a
  /// rank's own children, adopted when the rank died), except `keep` (the orphan guard, waited for elsewhere).
  void reapAdopted(pid_t keep) {
    reapAdopted_ = true;
    keep_ = keep;
  }

 private:
  struct Watched {
    ExitCallback onExit;
    std::shared_ptr<boost::asio::posix::stream_descriptor> pidfd;  ///< none: SIGCHLD reaps it
  };
  void arm();
  void reapWatched();
  /// `pid`'s pidfd is readable: reaps and delivers it (or leaves it to SIGCHLD when it is not ddprun's child yet).
  void onPidfd(pid_t pid, const std::shared_ptr<boost::asio::posix::stream_descriptor>& pidfd);

  boost::asio::io_context& io_;
  boost::asio::signal_set sigchld_;
  std::map<pid_t, Watched> watched_;
  bool reapAdopted_ = false;
  pid_t keep_ = -1;
};

}  // namespace ddprun::launcher
