#pragma once
// What the watch (worker_watch.hpp) needs of the world, as two small interfaces: the worker group it watches, and
// the evidence it gathers about the ranks. The agent plugs in the real ones (WorkerGroup, MachineEvidence); tests plug
// in fakes, and a recorded trace (evidence_trace.hpp) plays both, so the path from a suspected hang to the verdict
// runs with no processes and no sleeps.
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/progress_file.hpp"
#include "launcher/process/worker_exit.hpp"
#include "launcher/watch/evidence/process_activity.hpp"
#include "launcher/watch/evidence/python_position.hpp"
#include "launcher/watch/evidence/stack_text.hpp"

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

/// What one sample found of one rank.
struct RankSample {
  size_t localRank = 0;
  std::chrono::steady_clock::time_point at{};  ///< when it was read
  ActivityCounters counters;                   ///< its process tree (process_activity.hpp)
  std::optional<PythonPosition> python;        ///< where its main thread is in Python, when asked for
};

/// What the native stacks of one rank said of its main thread.
struct RankStacks {
  size_t localRank = 0;
  std::string file;  ///< where they were saved
  MainThread thread;
};

/// Where evidence about the ranks comes from: their progress files, /proc, their memory and a stack tool.
class EvidenceSource {
 public:
  struct SampleTarget {
    size_t localRank = 0;
    pid_t pid = -1;
    bool sockets = false;    ///< with the bytes through its TCP sockets (dearer: where it waits in a collective)
    bool python = false;     ///< with its Python position (where a look found it running Python in its own code)
    bool freshTree = false;  ///< its processes looked for again now (a verdict may rest on this sample)
  };
  struct StackTarget {
    size_t localRank = 0;
    pid_t pid = -1;
    std::string file;  ///< where the stacks are saved (written from its start)
  };
  using SamplesDone = std::function<void(std::vector<RankSample>)>;
  using StacksDone = std::function<void(std::vector<RankStacks>)>;

  virtual ~EvidenceSource() = default;
  /// Local rank `local`'s progress file now (never blocks: common/progress_file.hpp); nullopt when there is no complete
  /// report.
  virtual std::optional<ProgressRecord> progress(size_t local, const std::string& file) = 0;
  /// Samples each target off the agent's loop; `done` runs on the loop (never inside this call) with the targets that
  /// could be read within the reader's bounds (one that could not is missing: its evidence is unknown). One sampling
  /// at a time.
  virtual void sample(std::vector<SampleTarget> targets, SamplesDone done) = 0;
  /// Saves the native stacks of every thread of each target and of the processes it started, and says where each main
  /// thread is; `done` runs on the loop (never inside this call) when all are saved or `budget` has passed. One
  /// collection at a time.
  virtual void collectStacks(std::vector<StackTarget> targets, std::chrono::milliseconds budget, StacksDone done) = 0;
};

}  // namespace ddprun::launcher
