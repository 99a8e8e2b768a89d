#pragma once
// The watch's evidence as a trace: everything the watch (worker_watch.hpp) read of the ranks and the group, one JSON
// object a line, so that a real job's suspicion can be replayed through the same suspicion and verdict code on a fake
// clock (tests/support/watch_replay.hpp; docs/watching.md, "Recording the evidence", has the format). `ddprun
// --watch-record FILE` records one: an EvidenceRecorder stands in front of the real group and evidence source and
// writes each answer that differs from the last one it wrote for the same rank and kind.
#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.hpp"
#include "launcher/watch/watch_ports.hpp"
#include "launcher/watch/watch_settings.hpp"

namespace ddprun::launcher {

/// The format's name and version, on the trace's first line.
inline constexpr const char* kTraceFormat = "ddprun-watch-trace";
inline constexpr int kTraceVersion = 1;
/// A trace stops growing at this size (one line says so).
inline constexpr uint64_t kMaxTraceBytes = 256ull << 20;

/// What the trace's first line says of the run.
struct TraceHeader {
  int64_t startUnixMs = 0;       ///< the wall clock when recording began ("t" 0)
  double monitorInterval = 0.1;  ///< --monitor-interval: the watch's tick
  HangSettings hang;
  StragglerSettings straggler;
  bool pythonWorkers = false;
  bool multiNode = false;
};

/// The names the trace gives MainThreadPlace and PythonPosition::Status values, in their order.
inline constexpr const char* kTracePlaces[] = {"unknown", "collective", "gpu", "other", "exiting"};
inline constexpr const char* kTraceStatuses[] = {"not_python", "unreadable", "moved", "read"};

/// The trace's JSON of each thing it records (tests/support/watch_trace_reader.hpp reads them back).
nlohmann::json toJson(const TraceHeader& header);
nlohmann::json toJson(const ActivityCounters& counters);
nlohmann::json toJson(const PythonPosition& position);
/// A main thread as the trace keeps it: its place and frames, its position as a hash (two looks compare equal).
nlohmann::json toJson(const MainThread& thread);

/// Records what the watch reads into a trace file; hand it to the watch as both its group view and its evidence.
class EvidenceRecorder : public WorkerGroupView, public EvidenceSource {
 public:
  /// Throws ddprun::ConfigError when `path` cannot be written.
  EvidenceRecorder(const std::string& path, const Clock& clock, const TraceHeader& header, WorkerGroupView& group,
                   EvidenceSource& evidence);
  ~EvidenceRecorder() override;

  size_t size() const override { return group_.size(); }
  pid_t pid(size_t local) const override;
  int globalRank(size_t local) const override { return group_.globalRank(local); }
  const std::optional<WorkerExit>& exit(size_t local) const override;
  std::chrono::steady_clock::time_point lastOutput(size_t local) const override;
  bool finished(size_t local) const override { return group_.finished(local); }
  bool outputHeld(size_t local) const override;
  void abortForTracebacks(size_t local, int fd) override { group_.abortForTracebacks(local, fd); }

  std::optional<ProgressRecord> progress(size_t local, const std::string& file) override;
  void sample(std::vector<SampleTarget> targets, SamplesDone done) override;
  void collectStacks(std::vector<StackTarget> targets, std::chrono::milliseconds budget, StacksDone done) override;

 private:
  /// Writes `value` under `kind` for `local` when it differs from the last one written for them.
  void write(size_t local, const char* kind, nlohmann::json value) const;
  double since(std::chrono::steady_clock::time_point time) const;

  const Clock& clock_;
  WorkerGroupView& group_;
  EvidenceSource& evidence_;
  std::chrono::steady_clock::time_point start_;
  mutable std::ofstream out_;
  mutable uint64_t written_ = 0;
  mutable std::map<std::pair<size_t, std::string>, std::optional<nlohmann::json>> last_;
};

}  // namespace ddprun::launcher
