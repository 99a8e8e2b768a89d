#pragma once
// Saves where a group's ranks are: the native stacks of every thread of every rank, through eu-stack (Debian's
// elfutils; gdb -batch when eu-stack is missing), each into its rank's stacks file. Runs the tools as ddprun's
// children, which every worker allows to trace it (PR_SET_PTRACER: Yama's ptrace_scope 1 only lets an ancestor
// attach). Asynchronous on the agent's loop, bounded in time (one budget for all ranks together) and size; a
// missing tool is one log line. What the stacks say is read by stack_text.hpp, off the loop (machine_evidence.hpp).
#include <sys/types.h>

#include <boost/asio.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "launcher/process/process_spawn.hpp"

namespace ddprun::launcher {

/// At most this much of one rank's stacks is kept.
inline constexpr size_t kMaxStackFileBytes = 1 << 20;
/// At most this many of a rank's child processes have their stacks saved with it.
inline constexpr size_t kMaxStackChildren = 16;

class StackCollector {
 public:
  struct Target {
    size_t localRank = 0;
    pid_t pid = -1;
    std::string file;  ///< where the stacks are saved (written from its start)
    /// Processes the rank started (DataLoader workers, say): their stacks follow the rank's in the same file.
    std::vector<pid_t> children;
  };
  struct Saved {
    size_t localRank = 0;
    std::string file;
  };
  using Done = std::function<void(std::vector<Saved>)>;

  StackCollector(boost::asio::io_context& io, ChildReaper& reaper);
  /// Kills the tools still running.
  ~StackCollector();

  /// Starts one stack tool per target and per child of a target; `done` runs on the loop when all have finished or
  /// `budget` has passed (tools still running are killed), each child's stacks appended to its rank's file under a
  /// header line and each file cut to kMaxStackFileBytes. One collection at a time.
  void collect(std::vector<Target> targets, std::chrono::milliseconds budget, Done done);

 private:
  struct Run;
  void finish(const std::shared_ptr<Run>& run);

  boost::asio::io_context& io_;
  ChildReaper& reaper_;
  std::shared_ptr<Run> current_;
};

}  // namespace ddprun::launcher
