#pragma once
// How ranks start besides a plain fork and exec: forked from the program's forkserver template (--start-method
// forkserver), and, for a rank replacement, claimed from a spare rank that waits already forked (--restart-scope
// rank). Owns the template and the spare, and makes ddprun the child subreaper that adopts the ranks the template's
// child forks.
#include <boost/asio.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "launcher/process/fork_template.hpp"
#include "launcher/process/orphan_guard.hpp"
#include "launcher/process/spare_rank.hpp"

namespace ddprun::launcher {

class StartMethods {
 public:
  StartMethods(boost::asio::io_context& io, ChildReaper& reaper, OrphanGuard& guard);
  ~StartMethods();

  /// Starts `program`'s template when it supports the forkserver (`env`: the template's environment), with a spare
  /// rank when `wantSpare` and the program supports one; says in one line when it does not. `then` runs on the loop
  /// once the template is ready or has failed (ranks then start the normal way).
  void startForkServer(const std::string& program, const std::vector<std::string>& command,
                       std::map<std::string, std::string> env, bool wantSpare, std::function<void()> then);
  /// Forks a spare rank from the template after `delay`, unless one waits or `wanted()` says no by then.
  void prepareSpareAfter(std::chrono::milliseconds delay, std::function<bool()> wanted);
  /// Kills an unclaimed spare; the template exits with its connection.
  void stop();

  ForkTemplate* forkServer() const { return forkServer_.get(); }
  SpareRank* spare() const { return spare_.get(); }

 private:
  boost::asio::io_context& io_;
  ChildReaper& reaper_;
  OrphanGuard& guard_;
  std::map<std::string, std::string> env_;  ///< the template's, which a spare gets too
  std::unique_ptr<ForkTemplate> forkServer_;
  std::unique_ptr<SpareRank> spare_;
  boost::asio::steady_timer spareTimer_;
};

}  // namespace ddprun::launcher
