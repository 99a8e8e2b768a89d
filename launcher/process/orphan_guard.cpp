#include "launcher/process/orphan_guard.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>

#include <vector>

#include "common/empty_dirs.hpp"
#include "common/error.hpp"

namespace ddprun::launcher {
namespace {

// ddprun forks the guardian as the first thing it does (main.cpp). A fork's cost is in the pages: copying the page
// tables, then a copy-on-write fault (10-20 µs each on a busy VM) for every page either process writes afterwards
// that existed at the fork. Forked after option parsing and logging, it cost each agent about 5 ms of CPU, which a
// thousand agents starting on one host pay in full; at the start of main few pages exist (docs/benchmarks.md).
// Not clone(CLONE_VM), which would share ddprun's memory and copy nothing: the kernel kills every process sharing
// the memory of an OOM-killed process (and, before Linux 5.16, of one that dumps core), the very deaths of ddprun
// the guardian exists for.

/// The guardian's whole life: read the pipe, then kill and prune. (It was forked while ddprun had one thread,
/// so the C++ library is safe to use here.)
[[noreturn]] void guardianMain(int readEnd) {
  // The handlers ddprun's loop installed came along with the fork, and they write to a self-pipe the
  // guardian shares with ddprun: a Ctrl-Z would reach ddprun twice (once from here). Back to defaults.
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::signal(sig, SIG_DFL);
  }
  // Only EOF ends it. Every signal that would end or stop it is ignored, not only the stop signals: Slurm's
  // `scancel --signal=USR1` and `sbatch --signal` reach every process of the job step, the guardian included, and a
  // guardian ended by a warning would leave the workers unguarded. Faults (SIGSEGV and the like) keep their default.
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGPROF, SIGXCPU,
                  SIGXFSZ, SIGIO, SIGPWR, SIGSTKFLT, SIGTSTP, SIGTTIN, SIGTTOU}) {
    ::signal(sig, SIG_IGN);
  }
  for (int sig = SIGRTMIN; sig <= SIGRTMAX; ++sig) ::signal(sig, SIG_IGN);
  std::set<pid_t> groups;
  std::vector<std::string> prune;
  std::string pending;
  char buffer[512];
  for (;;) {
    ssize_t n = ::read(readEnd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buffer, static_cast<size_t>(n));
    size_t newline;
    while ((newline = pending.find('\n')) != std::string::npos) {
      const std::string line = pending.substr(0, newline);
      pending.erase(0, newline + 1);
      if (line.size() < 2) continue;
      if (line[0] == 'd') {
        prune.push_back(line.substr(1));
        continue;
      }
      const pid_t group = static_cast<pid_t>(std::strtol(line.c_str() + 1, nullptr, 10));
      if (group <= 1) continue;
      if (line[0] == '+') groups.insert(group);
      if (line[0] == '-') groups.erase(group);
    }
  }
  for (pid_t group : groups) ::kill(-group, SIGKILL);
  for (const auto& dir : prune) pruneEmptyDirectories(dir);
  ::_exit(0);
}

}  // namespace

OrphanGuard::OrphanGuard() {
  int fds[2];
  // O_CLOEXEC: a worker holding the write end would keep the guardian from ever seeing EOF.
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
    guardianMain(fds[0]);
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

void OrphanGuard::track(pid_t group) { send('+', std::to_string(group)); }
void OrphanGuard::untrack(pid_t group) { send('-', std::to_string(group)); }

void OrphanGuard::pruneOnExit(const std::string& dir) {
  if (dir.find('\n') == std::string::npos) send('d', dir);
}

}  // namespace ddprun::launcher
