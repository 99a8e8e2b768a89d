#pragma once
// ddprun's side of the spare rank protocol (common/spare_rank.hpp): with --restart-scope rank and the forkserver,
// one process forked from the template ahead of any failure, warmed up and waiting; a rank replacement claims it
// instead of forking a new process, which takes the fork and the program's start-up off the failure's path.
#include <sys/types.h>

#include <boost/asio.hpp>
#include <map>
#include <memory>
#include <string>

#include "launcher/process/orphan_guard.hpp"
#include "launcher/process/process_spawn.hpp"

namespace ddprun::launcher {

class ForkTemplate;
class OutputRelay;

class SpareRank {
 public:
  SpareRank(boost::asio::io_context& io, ChildReaper& reaper, OrphanGuard& guard);
  /// Kills a spare nobody claimed.
  ~SpareRank();
  SpareRank(const SpareRank&) = delete;
  SpareRank& operator=(const SpareRank&) = delete;

  /// Forks a spare from `forkServer` with `env` (DDPRUN_SPARE_RANK added) unless one is waiting already; what it
  /// writes before it is claimed reaches the console as "[spare]:". A spare that cannot be made, or dies before it
  /// is claimed, is said in one line; replacements then fork a new process as before. Throws nothing.
  void prepare(ForkTemplate& forkServer, const std::map<std::string, std::string>& env);
  /// True while a spare waits to be claimed.
  bool ready() const { return pid_ > 0; }
  /// Hands the spare over as a rank: the environment `env` and the three streams (-1: /dev/null). Returns its pid;
  /// from now on it is the caller's to watch, signal and guard, and this object has none. Throws ddprun::Error when
  /// there is no spare, or it is stopped (SIGSTOP, a debugger), has ended or cannot take the claim (it is then
  /// killed).
  pid_t claim(const std::map<std::string, std::string>& env, int stdinFd, int stdoutFd, int stderrFd);
  /// The pid of the spare claimed last (-1: none yet).
  pid_t lastClaimed() const { return lastClaimed_; }

 private:
  void discard();

  boost::asio::io_context& io_;
  ChildReaper& reaper_;
  OrphanGuard& guard_;
  int socket_ = -1;  ///< ddprun's end of the claim socket
  pid_t pid_ = -1;
  pid_t lastClaimed_ = -1;
  std::shared_ptr<OutputRelay> output_;
};

}  // namespace ddprun::launcher
