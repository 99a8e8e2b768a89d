#pragma once
// A guardian process that outlives ddprun by a moment: ddprun tells it, through a pipe, the process group of
// every running worker; when the pipe reaches end-of-file (ddprun exited, or was killed with SIGKILL) the
// guardian kills every group still registered and exits. PR_SET_PDEATHSIG only reaches a worker itself; this
// also reaches the processes a worker started in its group (data loaders, shell pipelines). Then it removes the
// empty directories under the run's log directories it was told of, so a killed ddprun leaves no empty tree.
#include <sys/types.h>

#include <string>

namespace ddprun::launcher {

class OrphanGuard {
 public:
  /// Forks the guardian. Call first thing in main (the .cpp says why: the cost of a fork is in the pages that
  /// exist at the fork), and in any case before any worker starts. Throws Error.
  OrphanGuard();
  /// Closes the pipe: the guardian kills whatever is still registered and exits; reaps it.
  ~OrphanGuard();
  OrphanGuard(const OrphanGuard&) = delete;
  OrphanGuard& operator=(const OrphanGuard&) = delete;

  /// The guardian's pid (a child of ddprun that only this class may wait for).
  pid_t pid() const { return guardian_; }
  /// Registers / unregisters a worker's process group (its pgid, equal to the worker's pid).
  void track(pid_t group);
  void untrack(pid_t group);
  /// When ddprun is gone, the guardian removes the empty directories under `dir` (and `dir` if it ends up
  /// empty), in the order given; files are never touched. A path with a newline is not passed on.
  void pruneOnExit(const std::string& dir);

 private:
  void send(char op, const std::string& value);
  int pipe_ = -1;
  pid_t guardian_ = -1;
};

}  // namespace ddprun::launcher
