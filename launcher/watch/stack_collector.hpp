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

class StackCollector {
 public:
  StackCollector(boost::asio::io_context& io, ChildReaper& reaper);
  /// Kills the tools still running.
  ~StackCollector();

  /// Starts one stack tool per target; `done` runs on the loop when all have finished or `budget` has
  /// passed (tools still running are killed). One collection at a time.
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
  ActivityCounters activity(pid_t pid) override { return sampler_.sample(pid, std::chrono::steady_clock::now()); }
  void collectStacks(std::vector<StackTarget> targets, std::chrono::milliseconds budget, StacksDone done) override {
    stacks_.collect(std::move(targets), budget, std::move(done));
  }

 private:
  StackCollector stacks_;
  ProcessTreeSampler sampler_;
};

}  // namespace ddprun::launcher
