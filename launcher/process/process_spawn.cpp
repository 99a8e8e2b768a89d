#include "launcher/process/process_spawn.hpp"

#include <fcntl.h>
#include <linux/close_range.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/error.hpp"

extern char** environ;

namespace ddprun::launcher {
namespace {

/// KEY=VALUE strings: ddprun's environment with `overrides` applied.
std::vector<std::string> buildEnvironment(const std::map<std::string, std::string>& overrides) {
  std::map<std::string, std::string> merged;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const char* eq = std::strchr(*entry, '=');
    if (eq != nullptr) merged.emplace(std::string(*entry, static_cast<size_t>(eq - *entry)), std::string(eq + 1));
  }
  for (const auto& [key, value] : overrides) merged[key] = value;
  std::vector<std::string> env;
  env.reserve(merged.size());
  for (const auto& [key, value] : merged) env.push_back(key + "=" + value);
  return env;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> result;
  result.reserve(strings.size() + 1);
  for (auto& s : strings) result.push_back(s.data());
  result.push_back(nullptr);
  return result;
}

/// A node mask for set_mempolicy(2): node `node` (0..1023) set.
struct NodeMask {
  unsigned long bits[1024 / (8 * sizeof(unsigned long))] = {};
};

/// The child between fork and exec: async-signal-safe calls only (no allocation, no locks).
[[noreturn]] void childMain(const SpawnSpec& spec, const char* path, char* const* argv, char* const* envp, int devNull,
                            int errorPipe, pid_t parent, const cpu_set_t* cpus, const NodeMask* memory) {
  if (spec.newSession) {
    ::setsid();
  } else {
    ::setpgid(0, 0);
  }
  // ddprun ignores SIGPIPE (a closed console must not kill the supervisor); an ignored signal survives
  // exec, so restore it, as Python's subprocess does. The mask too: the forking thread's is inherited.
  ::signal(SIGPIPE, SIG_DFL);
  ::signal(SIGXFSZ, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (spec.dieWithParent) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the parent died before prctl took effect
  }
  if (spec.allowParentToTrace) ::prctl(PR_SET_PTRACER, parent, 0, 0, 0);
  if (cpus != nullptr) ::sched_setaffinity(0, sizeof(cpu_set_t), cpus);
  // MPOL_PREFERRED (1): the node's memory first, any other when it is full.
  if (memory != nullptr) ::syscall(SYS_set_mempolicy, 1, memory->bits, sizeof(memory->bits) * 8);
  const int fds[3] = {spec.stdinFd, spec.stdoutFd, spec.stderrFd};
  for (int target = 0; target < 3; ++target) {
    const int source = fds[target] >= 0 ? fds[target] : devNull;
    // dup2 onto itself would keep FD_CLOEXEC; clear it by hand in that case.
    if (source == target) {
      ::fcntl(target, F_SETFD, 0);
    } else {
      ::dup2(source, target);
    }
  }
  // Whatever else ddprun inherited stays out of the worker (torchrun's Popen closes it too).
  ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
  for (const auto& [source, target] : spec.passFds) {
    if (source == target) {
      ::fcntl(target, F_SETFD, 0);
    } else {
      ::dup2(source, target);  // the new descriptor has no FD_CLOEXEC
    }
  }
  ::execve(path, argv, envp);
  const int error = errno;
  [[maybe_unused]] ssize_t n = ::write(errorPipe, &error, sizeof error);
  ::_exit(127);
}

}  // namespace

std::string resolveProgram(const std::string& name) {
  if (name.empty()) return "";
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(start, end - start);
    if (dir.empty()) dir = ".";
    const std::string candidate = dir + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return "";
}

pid_t spawnProcess(const SpawnSpec& spec) {
  if (spec.argv.empty()) throw Error("cannot start a process: empty command");
  const std::string path = resolveProgram(spec.argv[0]);
  if (path.empty()) throw Error("'" + spec.argv[0] + "': not found on PATH");
  std::vector<std::string> argvStrings = spec.argv;
  std::vector<std::string> envStrings = buildEnvironment(spec.env);
  auto argv = pointers(argvStrings);
  auto envp = pointers(envStrings);

  const int devNull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  int errorPipe[2];
  if (devNull < 0 || ::pipe2(errorPipe, O_CLOEXEC) != 0) {
    if (devNull >= 0) ::close(devNull);
    throw Error("'" + spec.argv[0] + "': " + std::strerror(errno));
  }
  // Built before the fork: the child may not allocate.
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  for (int cpu : spec.cpus) {
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &cpus);
  }
  NodeMask memory;
  if (spec.memoryNode >= 0 && spec.memoryNode < 1024) {
    memory.bits[spec.memoryNode / (8 * sizeof(unsigned long))] |= 1UL
                                                                  << (spec.memoryNode % (8 * sizeof(unsigned long)));
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    childMain(spec, path.c_str(), argv.data(), envp.data(), devNull, errorPipe[1], parent,
              spec.cpus.empty() ? nullptr : &cpus, spec.memoryNode >= 0 ? &memory : nullptr);
  }
  const int forkError = errno;
  ::close(errorPipe[1]);
  ::close(devNull);
  if (pid < 0) {
    ::close(errorPipe[0]);
    throw Error("'" + spec.argv[0] + "': fork: " + std::strerror(forkError));
  }
  // The pipe closes on a successful exec (CLOEXEC) and carries errno when exec failed.
  int execError = 0;
  ssize_t n;
  do {
    n = ::read(errorPipe[0], &execError, sizeof execError);
  } while (n < 0 && errno == EINTR);
  ::close(errorPipe[0]);
  if (n == static_cast<ssize_t>(sizeof execError)) {
    ::waitpid(pid, nullptr, 0);
    throw Error("'" + spec.argv[0] + "' (" + path + "): " + std::strerror(execError));
  }
  return pid;
}

bool setCpuAffinity(pid_t pid, const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cpus) {
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &set);
  }
  return ::sched_setaffinity(pid, sizeof set, &set) == 0;
}

ExitStatus decodeWaitStatus(int status) {
  ExitStatus exit;
  if (WIFSIGNALED(status)) exit.signal = WTERMSIG(status);
  if (WIFEXITED(status)) exit.exitCode = WEXITSTATUS(status);
  return exit;
}

bool hasExited(pid_t pid) {
  siginfo_t info{};
  return ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid;
}

ChildReaper::ChildReaper(boost::asio::io_context& io) : io_(io), sigchld_(io, SIGCHLD) { arm(); }

void ChildReaper::arm() {
  sigchld_.async_wait([this](const boost::system::error_code& ec, int) {
    if (ec) return;
    reapWatched();
    arm();
  });
}

void ChildReaper::watch(pid_t pid, ExitCallback onExit) {
  watched_[pid] = std::move(onExit);
  // It may have exited before SIGCHLD had anyone to tell.
  boost::asio::post(io_, [this] { reapWatched(); });
}

void ChildReaper::forget(pid_t pid) { watched_.erase(pid); }

void ChildReaper::reapWatched() {
  std::vector<std::pair<ExitCallback, ExitStatus>> exited;
  for (auto it = watched_.begin(); it != watched_.end();) {
    int status = 0;
    if (::waitpid(it->first, &status, WNOHANG) == it->first) {
      exited.emplace_back(std::move(it->second), decodeWaitStatus(status));
      it = watched_.erase(it);
    } else {
      ++it;
    }
  }
  while (reapAdopted_) {
    siginfo_t info{};
    if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) break;
    const pid_t pid = info.si_pid;
    if (pid == keep_ || watched_.count(pid)) break;  // theirs to wait for
    ::waitpid(pid, nullptr, WNOHANG);
  }
  // Called after the scan: a callback may watch or forget other pids.
  for (auto& [callback, status] : exited) callback(status);
}

}  // namespace ddprun::launcher
