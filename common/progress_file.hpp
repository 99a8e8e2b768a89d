#pragma once
// A worker's progress file: the path comes in DDPRUN_PROGRESS_FILE; the worker replaces the file's content
// each time it reports. The whole format:
//
//   line 1: the step, a whole decimal number (the only required field)
//   line 2 (optional): space-separated fields <samples> <phase> [<busy seconds>]
//           samples  cumulative samples this rank has processed in the run
//           phase    one word: what the rank does from now on (train, eval, checkpoint, ...)
//           busy     cumulative seconds this rank spent on its own work (not waiting for collectives)
//
// so that `pathlib.Path(os.environ["DDPRUN_PROGRESS_FILE"]).write_text(f"{step}\n")` is a complete
// integration. A reader may catch the file empty or half-written; it ignores such a read until the next one.
#include <cstdint>
#include <optional>
#include <string>

namespace ddprun {

/// One progress report.
struct ProgressRecord {
  int64_t step = 0;
  std::optional<int64_t> samples;
  std::string phase;            ///< "" when not reported
  std::optional<double> busySeconds;
};

/// Parses a progress file's content; nullopt for an empty, half-written or malformed one (no complete
/// first line with a step).
std::optional<ProgressRecord> parseProgress(const std::string& text);

/// Reads and parses the file at `path`; nullopt when it is missing or not (yet) complete.
std::optional<ProgressRecord> readProgressFile(const std::string& path);

/// The text a worker writes for `report` (line 1, and line 2 when samples or a phase are set).
std::string formatProgress(const ProgressRecord& report);

}  // namespace ddprun
