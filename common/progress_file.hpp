#pragma once
// The progress file: how a worker tells its launcher how far it got, through the file named by
// DDPRUN_PROGRESS_FILE. The whole content is replaced at each report:
//   line 1: the global step, in decimal;
//   line 2 (optional): "<samples> <phase> [<busy seconds>]": the samples this rank has processed in this run
//           (decimal), a one-word phase ("train", "eval", "checkpoint"; readers accept any word), and, optional,
//           the seconds this rank has spent on its own work in this run, not waiting for collectives (in
//           synchronous DDP every rank advances at the slowest one's pace; only busy time shows who it is).
// Lines after the second are ignored. A reader may see an empty or half-written file, or (for a moment)
// stale bytes after the second line; it keeps the last good record until the next read. Any program can
// write it, e.g. Python: pathlib.Path(os.environ["DDPRUN_PROGRESS_FILE"]).write_text(f"{step}\n").
#include <cstdint>
#include <optional>
#include <string>

namespace ddprun {

/// Environment variable naming the progress file.
inline constexpr const char* kProgressFileEnv = "DDPRUN_PROGRESS_FILE";

/// One report.
struct ProgressRecord {
  int64_t step = 0;                 ///< global step
  std::optional<int64_t> samples;   ///< cumulative samples of this rank in this run, when reported
  std::string phase;                ///< "" when not reported
  std::optional<double> busySeconds;  ///< cumulative busy seconds, when reported
};

/// The text of `record` in the format above ("<step>\n" or "<step>\n<samples> <phase>\n").
std::string formatProgress(const ProgressRecord& record);

/// Parses a progress file's content; nullopt when line 1 is not a complete decimal number followed by a
/// newline (empty, half-written or foreign content). A malformed line 2 is ignored (step only).
std::optional<ProgressRecord> parseProgress(const std::string& content);

/// Reads and parses the file at `path` (one read of at most 256 bytes); nullopt when it is missing, empty or
/// not (yet) complete.
std::optional<ProgressRecord> readProgressFile(const std::string& path);

/// Writes reports to one progress file cheaply: the descriptor stays open, each report is one pwrite at
/// offset 0 (plus an ftruncate only when the text got shorter), never an fsync. Not thread-safe.
class ProgressFileWriter {
 public:
  /// Opens `path` for writing, created (mode 0644) or emptied. Throws IoError naming the file.
  explicit ProgressFileWriter(const std::string& path);
  ~ProgressFileWriter();
  ProgressFileWriter(const ProgressFileWriter&) = delete;
  ProgressFileWriter& operator=(const ProgressFileWriter&) = delete;

  /// Replaces the file's content with `record`. Throws IoError naming the file when the write fails.
  void report(const ProgressRecord& record);

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  size_t lastSize_ = 0;  ///< bytes of the previous report
};

}  // namespace ddprun
