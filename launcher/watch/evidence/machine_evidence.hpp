#pragma once
// The machine as the watch's evidence source (watch_ports.hpp): progress files, /proc, the ranks' memory and their
// native stacks. Nothing a rank does may stop the agent, so every read of another process (its /proc, its memory, the
// files its mappings name, the stacks a tool saved of it) runs on a thread of its own (OffLoopReader), bounded in time
// per job; the agent's loop only hands over targets and takes results.
#include <sys/types.h>

#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "launcher/watch/evidence/python_position.hpp"
#include "launcher/watch/evidence/stack_collector.hpp"
#include "launcher/watch/watch_ports.hpp"

namespace ddprun::launcher {

/// Runs jobs in order on a thread of its own. A job that overruns its budget is abandoned: what it returns is
/// dropped, its thread is left to end by itself (it holds only its own state), and a new thread, with new readers
/// that skip what the stuck job was reading, takes the jobs after it; after kMaxAbandoned such threads every job
/// fails at once. Never blocks the loop: not when a job is stuck, not when the reader is destroyed.
class OffLoopReader {
 public:
  /// What one thread's jobs use: the readers and their caches, never touched by two threads.
  struct Readers {
    ProcessTreeSampler sampler;
    PythonPositionReader python;
    std::set<pid_t> skipMemory;  ///< processes whose memory a stuck read was reading: not read again
    std::set<pid_t> skipAll;     ///< processes whose /proc a stuck read was reading: not read again
    std::atomic<pid_t> reading{-1};
    std::atomic<bool> readingMemory{false};
  };
  /// Runs on the reader's thread; what it returns runs on the loop.
  using Job = std::function<std::function<void()>(Readers&)>;
  /// Called on the loop when a job was abandoned: the process it was reading (-1: none), and whether in its memory.
  using Overrun = std::function<void(pid_t pid, bool memory)>;

  static constexpr int kMaxAbandoned = 4;

  explicit OffLoopReader(boost::asio::io_context& io);
  ~OffLoopReader();
  OffLoopReader(const OffLoopReader&) = delete;
  OffLoopReader& operator=(const OffLoopReader&) = delete;

  void run(Job job, std::chrono::milliseconds budget, Overrun onOverrun);
  /// Whether kMaxAbandoned threads got stuck: jobs fail at once.
  bool givenUp() const { return abandoned_ >= kMaxAbandoned; }

 private:
  struct Worker;
  std::shared_ptr<Worker> start(std::set<pid_t> skipMemory, std::set<pid_t> skipAll);
  void abandon(uint64_t job, const Overrun& onOverrun);

  boost::asio::io_context& io_;
  std::shared_ptr<bool> alive_;  ///< results posted to the loop run only while the reader lives
  std::shared_ptr<Worker> worker_;
  std::map<uint64_t, std::shared_ptr<boost::asio::steady_timer>> timers_;  ///< each job's budget
  uint64_t nextJob_ = 0;
  int abandoned_ = 0;
};

class MachineEvidence : public EvidenceSource {
 public:
  MachineEvidence(boost::asio::io_context& io, ChildReaper& reaper);
  std::optional<ProgressRecord> progress(size_t local, const std::string& file) override;
  void sample(std::vector<SampleTarget> targets, SamplesDone done) override;
  /// Adds each rank's child processes (as the last sample found them) to its target; the stacks are read off the loop.
  void collectStacks(std::vector<StackTarget> targets, std::chrono::milliseconds budget, StacksDone done) override;

 private:
  /// A job that overran: said once per process.
  void overran(pid_t pid, bool memory);

  StackCollector stacks_;
  OffLoopReader reader_;
  std::map<pid_t, std::vector<pid_t>> members_;  ///< each rank's processes, as the last sample found them
  std::set<pid_t> overrunSaid_;
};

}  // namespace ddprun::launcher
