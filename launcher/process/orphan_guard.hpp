#pragma once
// A guardian process (orphan_guardian.hpp) that outlives ddprun by a moment: ddprun tells it, through a pipe, the
// process group of every running worker; when the pipe reaches end-of-file (ddprun exited, or was killed with SIGKILL)
// the guardian kills every group still registered and exits. PR_SET_PDEATHSIG only reaches a worker itself; this also
// reaches the processes a worker started in its group (data loaders, shell pipelines). Then it removes the empty
// directories under the run's log directories it was told of, so a killed ddprun leaves no empty tree.
#include <sys/types.h>

#include <string>
#include <vector>

namespace ddprun::launcher {

class OrphanGuard {
 public:
  /// With `guardianProgram` (ddprun-orphan-guard) an executable file, the guardian is that program, started with
  /// posix_spawn by start(), which the first track() calls: nothing is started while no worker exists (a node
  /// waiting in a rendezvous pays nothing for it). Without it, the guardian is a fork of this process, made here: then
  /// construct it first thing in main, before any thread (the .cpp says why). Throws Error.
  explicit OrphanGuard(const std::string& guardianProgram = bundledGuardianProgram());
  /// The ddprun-orphan-guard installed with this program: beside it (the build tree), else in
  /// ../libexec/ddprun/ from its directory (an installed prefix); "" if neither exists.
  static std::string bundledGuardianProgram();
  /// Starts the guardian if it does not run yet, and hands it the directories named so far. Throws Error.
  void start();
  /// Closes the pipe: the guardian kills whatever is still registered and exits; reaps it.
  ~OrphanGuard();
  OrphanGuard(const OrphanGuard&) = delete;
  OrphanGuard& operator=(const OrphanGuard&) = delete;

  /// The guardian's pid (a child of ddprun that only this class may wait for); -1 before start().
  pid_t pid() const { return guardian_; }
  /// Whether the guardian is the spawned program (true) or a fork of this process.
  bool spawned() const { return spawned_; }
  /// Registers / unregisters a worker's process group (its pgid, equal to the worker's pid). track() starts the
  /// guardian first if needed.
  void track(pid_t group);
  void untrack(pid_t group);
  /// When ddprun is gone, the guardian removes the empty directories under `dir` (and `dir` if it ends up
  /// empty), in the order given; files are never touched. A path with a newline is not passed on. Before start(),
  /// the directory is kept for it: a ddprun killed before it started a worker leaves its empty run directory.
  void pruneOnExit(const std::string& dir);

 private:
  void send(char op, const std::string& value);
  void forkGuardian();
  std::string program_;  ///< the guardian program, or "" when the guardian is a fork
  std::vector<std::string> pendingPrune_;
  int pipe_ = -1;
  pid_t guardian_ = -1;
  bool spawned_ = false;
};

}  // namespace ddprun::launcher
