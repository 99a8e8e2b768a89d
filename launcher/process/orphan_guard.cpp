#include "launcher/process/orphan_guard.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "common/error.hpp"
#include "launcher/process/orphan_guardian.hpp"

namespace ddprun::launcher {
namespace {

// Why a program of its own, started with posix_spawn (clone(CLONE_VM | CLONE_VFORK), then exec): a fork's cost is
// in the pages. Copying the page tables, then a copy-on-write fault (10-20 µs each on a busy VM) for every page
// either process writes afterwards that existed at the fork: forked first thing in main, about 2.5-3 ms of each
// agent's 11-15 ms of CPU before it joins a rendezvous. The spawned guardian shares nothing and copies nothing, so it
// can be started when it is first needed, with the first worker, also from a process that has threads by then (a fork
// could not run C++ code there), and a node waiting in a rendezvous has not paid for it. Its own start (an exec) costs
// about what the fork did. Not clone(CLONE_VM) without an exec, which would share ddprun's memory: the kernel kills
// every process sharing the memory of an OOM-killed process (and, before Linux 5.16, of one that dumps core), the very
// deaths of ddprun the guardian exists for. Where the program is missing (a ddprun copied alone), the guardian is a
// fork.

constexpr const char* kGuardianName = "ddprun-orphan-guard";

bool isExecutableFile(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

/// posix_spawn of `program` with the pipe's read end as its descriptor 3 (its one argument), and no other descriptor of
/// ddprun's but 0-2: by the time the first worker starts, ddprun holds sockets (its rendezvous and store
/// connections) that a guardian outliving it must not keep open. The child's pid, or -1 (errno set).
pid_t spawnGuardian(const std::string& program, int readEnd) {
  constexpr int kGuardianFd = 3;
  posix_spawn_file_actions_t actions;
  if (int rc = ::posix_spawn_file_actions_init(&actions); rc != 0) {
    errno = rc;
    return -1;
  }
  // dup2 onto itself (readEnd == 3) clears close-on-exec too (glibc, Austin Group issue 411).
  int rc = ::posix_spawn_file_actions_adddup2(&actions, readEnd, kGuardianFd);
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 34)
  if (rc == 0) rc = ::posix_spawn_file_actions_addclosefrom_np(&actions, kGuardianFd + 1);
#endif
  const std::string fd = std::to_string(kGuardianFd);
  char* argv[] = {const_cast<char*>(program.c_str()), const_cast<char*>(fd.c_str()), nullptr};
  pid_t pid = -1;
  if (rc == 0) rc = ::posix_spawn(&pid, program.c_str(), &actions, nullptr, argv, environ);
  ::posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    errno = rc;
    return -1;
  }
  return pid;
}

}  // namespace

std::string OrphanGuard::bundledGuardianProgram() {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return "";
  std::string dir(self, static_cast<size_t>(n));
  dir.erase(dir.rfind('/'));
  for (const std::string& candidate : {dir + "/" + kGuardianName, dir + "/../libexec/ddprun/" + kGuardianName}) {
    if (isExecutableFile(candidate)) return candidate;
  }
  return "";
}

OrphanGuard::OrphanGuard(const std::string& guardianProgram) {
  if (!guardianProgram.empty() && isExecutableFile(guardianProgram)) {
    program_ = guardianProgram;  // spawned by start()
  } else {
    forkGuardian();
  }
}

void OrphanGuard::start() {
  if (guardian_ > 0) return;
  int fds[2];
  // O_CLOEXEC: a worker holding the write end would keep the guardian from ever seeing EOF.
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw Error(std::string("cannot create the orphan guard's pipe: ") + std::strerror(errno));
  guardian_ = spawnGuardian(program_, fds[0]);
  const int spawnError = errno;
  ::close(fds[0]);
  if (guardian_ <= 0) {
    ::close(fds[1]);
    guardian_ = -1;
    throw Error("cannot start the orphan guard " + program_ + ": " + std::strerror(spawnError));
  }
  pipe_ = fds[1];
  spawned_ = true;
  for (const auto& dir : pendingPrune_) send('d', dir);
  pendingPrune_.clear();
}

void OrphanGuard::forkGuardian() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw Error(std::string("cannot create the orphan guard's pipe: ") + std::strerror(errno));
  guardian_ = ::fork();
  if (guardian_ < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw Error(std::string("cannot fork the orphan guard: ") + std::strerror(errno));
  }
  if (guardian_ == 0) {
    ::close(fds[1]);
    // The handlers this process installed came along with the fork, and they write to a self-pipe the guardian
    // would share: a Ctrl-Z would reach ddprun twice (once from here). Back to defaults first.
    for (int sig = 1; sig < NSIG; ++sig) {
      if (sig != SIGKILL && sig != SIGSTOP) ::signal(sig, SIG_DFL);
    }
    runOrphanGuardian(fds[0]);
  }
  ::close(fds[0]);
  pipe_ = fds[1];
}

OrphanGuard::~OrphanGuard() {
  if (pipe_ >= 0) ::close(pipe_);
  if (guardian_ > 0) ::waitpid(guardian_, nullptr, 0);
}

void OrphanGuard::send(char op, const std::string& value) {
  const std::string line = op + value + "\n";
  // Short writes to a pipe are atomic; a guardian that died (EPIPE) cannot be helped here.
  [[maybe_unused]] ssize_t n = ::write(pipe_, line.data(), line.size());
}

void OrphanGuard::track(pid_t group) {
  start();
  send('+', std::to_string(group));
}

void OrphanGuard::untrack(pid_t group) {
  if (pipe_ >= 0) send('-', std::to_string(group));
}

void OrphanGuard::pruneOnExit(const std::string& dir) {
  if (dir.find('\n') != std::string::npos) return;
  if (pipe_ >= 0) {
    send('d', dir);
  } else {
    pendingPrune_.push_back(dir);
  }
}

}  // namespace ddprun::launcher
