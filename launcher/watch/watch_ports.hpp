#pragma once
// What the watch (worker_watch.hpp) needs of the world, as two small interfaces: the worker group it watches,
// and the machine it gathers evidence from. The agent plugs in the real ones (WorkerGroup, MachineEvidence);
// tests plug in fakes, so the path from a suspected hang to the restart runs with no processes and no sleeps.
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "launcher/process/worker_exit.hpp"
#include "launcher/watch/process_activity.hpp"
#include "launcher/watch/python_position.hpp"

namespace ddprun::launcher {

/// The current attempt's workers, as the watch sees them.
class WorkerGroupView {
 public:
  virtual ~WorkerGroupView() = default;
  virtual size_t size() const = 0;
  virtual pid_t pid(size_t local) const = 0;
  virtual int globalRank(size_t local) const = 0;
  virtual const std::optional<WorkerExit>& exit(size_t local) const = 0;
  /// When the worker last wrote output (steady clock; time_point{} when never).
  virtual std::chrono::steady_clock::time_point lastOutput(size_t local) const = 0;
  /// True when the worker has exited and all it wrote to stderr has been passed on.
  virtual bool finished(size_t local) const = 0;
  /// True while ddprun does not read the worker's output because the console is full: the worker may be waiting
  /// in write(2), held back by the console, not hung.
  virtual bool outputHeld(size_t local) const = 0;
  /// SIGABRT to the worker, its stderr appended to `fd` (owned) from now on (for its Python tracebacks).
  virtual void abortForTracebacks(size_t local, int fd) = 0;
};

/// Where evidence about the ranks comes from: /proc and a stack tool.
class EvidenceSource {
 public:
  struct StackTarget {
    size_t localRank = 0;
    pid_t pid = -1;
    std::string file;  ///< where the stacks are saved (written from its start)
    /// Processes the rank started (DataLoader workers, say): their stacks follow the rank's in the same file.
    std::vector<pid_t> children;
  };
  struct Stacks {
    size_t localRank = 0;
    std::string file;
    std::string text;  ///< what was saved (capped); "" when nothing could be
  };
  using StacksDone = std::function<void(std::vector<Stacks>)>;

  virtual ~EvidenceSource() = default;
  /// The counters of `pid`'s process tree now (process_activity.hpp); `sockets`: with the bytes through its TCP
  /// sockets (dearer: asked for only where the rank waits in a collective).
  virtual ActivityCounters activity(pid_t pid, bool sockets) = 0;
  /// Saves the native stacks of every thread of each target; `done` runs on the agent's loop (never inside this
  /// call) when all are saved or `budget` has passed. One collection at a time.
  virtual void collectStacks(std::vector<StackTarget> targets, std::chrono::milliseconds budget, StacksDone done) = 0;
  /// Where `pid`'s main thread is in its Python script now, read without stopping it (python_position.hpp).
  virtual PythonPosition pythonPosition(pid_t pid) = 0;
};

}  // namespace ddprun::launcher
