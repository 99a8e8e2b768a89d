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

#include "common/off_loop_reader.hpp"
#include "launcher/watch/evidence/python_position.hpp"
#include "launcher/watch/evidence/stack_collector.hpp"
#include "launcher/watch/watch_ports.hpp"

namespace ddprun::launcher {

/// What the evidence reader's thread reads with (common/off_loop_reader.hpp): the readers and their caches, and what a
/// stuck read taught the next thread not to read again.
struct EvidenceReaders {
  ProcessTreeSampler sampler;
  PythonPositionReader python;
  std::set<pid_t> skipMemory;  ///< processes whose memory a stuck read was reading
  std::set<pid_t> skipAll;     ///< processes whose /proc a stuck read was reading
  std::atomic<pid_t> reading{-1};
  std::atomic<bool> readingMemory{false};
  /// Fresh readers that skip what `stuck` got stuck reading.
  static std::unique_ptr<EvidenceReaders> after(const EvidenceReaders& stuck);
};

class MachineEvidence : public EvidenceSource {
 public:
  MachineEvidence(boost::asio::io_context& io, ChildReaper& reaper);
  std::optional<ProgressRecord> progress(size_t local, const std::string& file) override;
  void sample(std::vector<SampleTarget> targets, SamplesDone done) override;
  /// Adds each rank's child processes (as the last sample found them) to its target; the stacks are read off the loop.
  void collectStacks(std::vector<StackTarget> targets, std::chrono::milliseconds budget, StacksDone done) override;

 private:
  /// A job that overran (`stuck`: the readers it got stuck in; nullptr when the reader had given up): said once.
  void overran(const EvidenceReaders* stuck);

  StackCollector stacks_;
  OffLoopReader<EvidenceReaders> reader_;
  std::map<pid_t, std::vector<pid_t>> members_;  ///< each rank's processes, as the last sample found them
  std::set<pid_t> overrunSaid_;
};

}  // namespace ddprun::launcher
