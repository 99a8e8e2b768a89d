#pragma once
// Saves where a group's ranks are before a hung group is stopped: the native stacks of every thread of every
// rank, through eu-stack (Debian's elfutils; gdb -batch when eu-stack is missing), each into its rank's
// stacks file. Runs the tools as ddprun's children, which every worker allows to trace it
// (PR_SET_PTRACER: Yama's ptrace_scope 1 only lets an ancestor attach). Asynchronous on the agent's loop,
// bounded in time (one budget for all ranks together) and size; a missing tool is one log line.
#include <sys/types.h>

#include <boost/asio.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "launcher/process_spawn.hpp"

namespace ddprun::launcher {

/// At most this much of one rank's stacks is kept.
inline constexpr size_t kMaxStackFileBytes = 1 << 20;

/// The innermost frame of the main thread (TID == PID) in eu-stack -m or gdb output that lies outside the C
/// runtime (libc, libpthread, the dynamic loader, libstdc++): where the program itself waits. "" when none.
std::string innermostNativeFrame(const std::string& stacks, pid_t pid);

/// The innermost Python frame of the thread that got the signal, from faulthandler's dump
/// ("Current thread 0x… (most recent call first):\n  File "x.py", line 3 in f"); "" when none.
std::string innermostPythonFrame(const std::string& stacks);

/// Whether a main thread stopped in these frames (from innermostNativeFrame / innermostPythonFrame) waits for
/// its peers in a collective: c10d (ProcessGroup*, Reducer, Work::wait), Gloo, NCCL, ddprun's own
/// communicators (CollectiveQueue, ShmGroup), or a torch.distributed call in Python. Such a rank is most likely
/// a victim of a hang elsewhere, not its cause.
bool waitsInCollective(const std::string& nativeFrame, const std::string& pythonFrame);

class StackCollector {
 public:
  struct Target {
    size_t localRank = 0;
    pid_t pid = -1;
    std::string file;  ///< written from its start
  };
  struct Result {
    size_t localRank = 0;
    std::string file;
    std::string innermost;  ///< innermostNativeFrame(); "" when nothing was saved
  };
  using Done = std::function<void(std::vector<Result>)>;

  StackCollector(boost::asio::io_context& io, ChildReaper& reaper);
  ~StackCollector();

  /// Starts one stack tool per target; `done` runs on the loop when all have finished or `budget` has
  /// passed (tools still running are killed). One collection at a time.
  void collect(std::vector<Target> targets, std::chrono::milliseconds budget, Done done);

 private:
  struct Run;
  void finish(const std::shared_ptr<Run>& run);

  boost::asio::io_context& io_;
  ChildReaper& reaper_;
  std::shared_ptr<Run> current_;
};

}  // namespace ddprun::launcher
