#include "launcher/process/process_spawn.hpp"

#include <fcntl.h>
#include <linux/close_range.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
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

/// Everything the child needs, built before it starts: it may not allocate.
struct ChildArgs {
  const SpawnSpec* spec;
  const char* path;
  char* const* argv;
  char* const* envp;
  int devNull;
  int errorPipe;
  pid_t parent;
  const cpu_set_t* cpus;
  const NodeMask* memory;
};

/// The child may run a signal handler of ddprun's between its start and exec, and it shares ddprun's memory
/// (CLONE_VM): every handled signal goes back to its default first, as glibc's posix_spawn does.
void resetHandledSignals() {
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction current {};
    if (::sigaction(sig, nullptr, &current) != 0) continue;  // not a signal one may ask about (32, 33)
    if (current.sa_handler == SIG_IGN || current.sa_handler == SIG_DFL) continue;
    struct sigaction standard {};
    standard.sa_handler = SIG_DFL;
    ::sigaction(sig, &standard, nullptr);
  }
}

/// The child between its start and exec, on a stack of its own in ddprun's memory (CLONE_VM | CLONE_VFORK):
/// async-signal-safe calls only (no allocation, no locks, nothing written that ddprun reads but the pipe).
[[noreturn]] void childMain(const ChildArgs& a) {
  const SpawnSpec& spec = *a.spec;
  resetHandledSignals();
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
    if (::getppid() != a.parent) ::_exit(127);  // the parent died before prctl took effect
  }
  if (spec.allowParentToTrace) ::prctl(PR_SET_PTRACER, a.parent, 0, 0, 0);
  if (a.cpus != nullptr) ::sched_setaffinity(0, sizeof(cpu_set_t), a.cpus);
  // MPOL_PREFERRED (1): the node's memory first, any other when it is full.
  if (a.memory != nullptr) ::syscall(SYS_set_mempolicy, 1, a.memory->bits, sizeof(a.memory->bits) * 8);
  const int fds[3] = {spec.stdinFd, spec.stdoutFd, spec.stderrFd};
  for (int target = 0; target < 3; ++target) {
    const int source = fds[target] >= 0 ? fds[target] : a.devNull;
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
  ::execve(a.path, a.argv, a.envp);
  const int error = errno;
  [[maybe_unused]] ssize_t n = ::write(a.errorPipe, &error, sizeof error);
  ::_exit(127);
}

int childEntry(void* args) { childMain(*static_cast<const ChildArgs*>(args)); }

/// The child's stack: it runs only the few system calls above (and, with every signal blocked until it resets
/// the handlers, no handler of ddprun's).
constexpr size_t kChildStackBytes = 64 * 1024;

/// Starts childMain in a process that shares ddprun's memory until it execs (CLONE_VM | CLONE_VFORK, as
/// glibc's posix_spawn): unlike fork, nothing of ddprun's address space is copied, which is what a worker start
/// costs most on a busy machine (page tables, then a copy-on-write fault for each page ddprun writes next).
/// Returns the pid, or -1 with errno set.
pid_t startChild(ChildArgs& args) {
  void* stack =
      ::mmap(nullptr, kChildStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) return -1;
  // Every signal blocked across the start: the child unblocks them after it reset ddprun's handlers.
  sigset_t all, previous;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &previous);
  // The parent is suspended until the child execs or exits, so the stack is free again when clone returns.
  const pid_t pid =
      ::clone(childEntry, static_cast<char*>(stack) + kChildStackBytes, CLONE_VM | CLONE_VFORK | SIGCHLD, &args);
  const int error = errno;
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  ::munmap(stack, kChildStackBytes);
  errno = error;
  return pid;
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
  // Not on PATH: a program installed beside ddprun (ddprun-worker in <prefix>/bin or in the build tree's bin/), so the
  // shipped configs and the README's example run from any directory.
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    std::string beside(self, static_cast<size_t>(n));
    beside = beside.substr(0, beside.rfind('/') + 1) + name;
    if (::access(beside.c_str(), X_OK) == 0) return beside;
  }
  return "";
}

pid_t spawnProcess(const SpawnSpec& spec) {
  if (spec.argv.empty()) throw Error("cannot start a process: empty command");
  const std::string path = resolveProgram(spec.argv[0]);
  if (path.empty()) throw Error("'" + spec.argv[0] + "': not found on PATH or beside ddprun");
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
  ChildArgs args{&spec,
                 path.c_str(),
                 argv.data(),
                 envp.data(),
                 devNull,
                 errorPipe[1],
                 ::getpid(),
                 spec.cpus.empty() ? nullptr : &cpus,
                 spec.memoryNode >= 0 ? &memory : nullptr};
  const pid_t pid = startChild(args);
  const int forkError = errno;
  ::close(errorPipe[1]);
  ::close(devNull);
  if (pid < 0) {
    ::close(errorPipe[0]);
    throw Error("'" + spec.argv[0] + "': clone: " + std::strerror(forkError));
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
  Watched& watched = watched_[pid];
  watched.onExit = std::move(onExit);
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd >= 0) {
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);  // pidfd_open sets it; said for kernels that took flags differently
    watched.pidfd = std::make_shared<boost::asio::posix::stream_descriptor>(io_, fd);
    watched.pidfd->async_wait(boost::asio::posix::stream_descriptor::wait_read,
                              [this, pid, pidfd = watched.pidfd](const boost::system::error_code& ec) {
                                if (!ec) onPidfd(pid, pidfd);
                              });
  }
  // It may have exited before SIGCHLD had anyone to tell.
  boost::asio::post(io_, [this] { reapWatched(); });
}

void ChildReaper::forget(pid_t pid) {
  const auto it = watched_.find(pid);
  if (it == watched_.end()) return;
  if (it->second.pidfd) it->second.pidfd->close();
  watched_.erase(it);
}

void ChildReaper::onPidfd(pid_t pid, const std::shared_ptr<boost::asio::posix::stream_descriptor>& pidfd) {
  const auto it = watched_.find(pid);
  if (it == watched_.end() || it->second.pidfd != pidfd) return;  // forgotten, or a reused pid watched anew
  int status = 0;
  if (::waitpid(pid, &status, WNOHANG) != pid) {
    // Not (yet) ddprun's child to reap: SIGCHLD takes over for it.
    it->second.pidfd->close();
    it->second.pidfd.reset();
    return;
  }
  ExitCallback onExit = std::move(it->second.onExit);
  pidfd->close();
  watched_.erase(it);
  onExit(decodeWaitStatus(status));
}

void ChildReaper::reapWatched() {
  std::vector<std::pair<ExitCallback, ExitStatus>> exited;
  for (auto it = watched_.begin(); it != watched_.end();) {
    int status = 0;
    // A pid with a pidfd is reaped when its pidfd says so, in the order the exits happened.
    if (!it->second.pidfd && ::waitpid(it->first, &status, WNOHANG) == it->first) {
      exited.emplace_back(std::move(it->second.onExit), decodeWaitStatus(status));
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
