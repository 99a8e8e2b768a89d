#pragma once
// Saves where a group's ranks are: the native stacks of every thread of every rank, through eu-stack (Debian's
// elfutils; gdb -batch when eu-stack is missing), each into its rank's stacks file. Runs the tools as ddprun's
// children, which every worker allows to trace it (PR_SET_PTRACER: Yama's ptrace_scope 1 only lets an ancestor
// attach). Asynchronous on the agent's loop, bounded in time (one budget for all ranks together) and size; a
// missing tool is one log line. What the stacks say is read by stack_text.hpp.
#include <sys/types.h>

#include <boost/asio.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "launcher/process/process_spawn.hpp"
#include "launcher/watch/watch_ports.hpp"

namespace ddprun::launcher {

/// At most this much of one rank's stacks is kept.
inline constexpr size_t kMaxStackFileBytes = 1 << 20;
/// At most this many of a rank's child processes have their stacks saved with it.
inline constexpr size_t kMaxStackChildren = 16;

class StackCollector {
 public:
  StackCollector(boost::asio::io_context& io, ChildReaper& reaper);
  /// Kills the tools still running.
  ~StackCollector();

  /// Starts one stack tool per target and per child of a target; `done` runs on the loop when all have finished or
  /// `budget` has passed (tools still running are killed), each child's stacks appended to its rank's file under a
  /// header line. One collection at a time.
  void collect(std::vector<EvidenceSource::StackTarget> targets, std::chrono::milliseconds budget,
               EvidenceSource::StacksDone done);

 private:
  struct Run;
  void finish(const std::shared_ptr<Run>& run);

  boost::asio::io_context& io_;
  ChildReaper& reaper_;
  std::shared_ptr<Run> current_;
};

/// The machine as the watch's evidence source: /proc and StackCollector.
class MachineEvidence : public EvidenceSource {
 public:
  MachineEvidence(boost::asio::io_context& io, ChildReaper& reaper) : stacks_(io, reaper) {}
  ActivityCounters activity(pid_t pid, bool sockets) override {
    return sampler_.sample(pid, std::chrono::steady_clock::now(), sockets);
  }
  /// Adds each rank's child processes (as last found by activity()) to its target.
  void collectStacks(std::vector<StackTarget> targets, std::chrono::milliseconds budget, StacksDone done) override;
  PythonPosition pythonPosition(pid_t pid) override { return python_.read(pid); }

 private:
  StackCollector stacks_;
  PythonPositionReader python_;
  ProcessTreeSampler sampler_;
};

}  // namespace ddprun::launcher
