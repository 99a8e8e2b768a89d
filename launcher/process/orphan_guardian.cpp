#include "launcher/process/orphan_guardian.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "common/empty_dirs.hpp"

namespace ddprun::launcher {

void runOrphanGuardian(int readEnd) {
  // Every signal that would end or stop it is ignored, not only the stop signals: Slurm's `scancel --signal=USR1`
  // and `sbatch --signal` reach every process of the job step, the guardian included, and a guardian ended by a
  // warning would leave the workers unguarded. Faults (SIGSEGV and the like) keep their default.
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

}  // namespace ddprun::launcher
