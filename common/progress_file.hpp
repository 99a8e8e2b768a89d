#pragma once
// The progress file: how a worker tells its launcher how far it got, through the file named by
// DDPRUN_PROGRESS_FILE. The whole content is replaced at each report:
//   line 1: the global step, in decimal;
//   line 2 (optional): "<samples> <phase> [<busy seconds>]": the samples this rank has processed in this run
//           (decimal), a one-word phase ("train", "eval", "checkpoint"; readers accept any word), and, optional,
//           the seconds this rank has spent on its own work in this run, not waiting for collectives (in
//           synchronous DDP every rank advances at the slowest one's pace; only busy time shows who it is).
//   any later line (optional) "<name>=<number>": a scalar the rank wants shown, e.g. "loss=0.31" (a name of
//           letters, digits, '_' and '.', at most 32 characters, starting with a letter; at most 8 scalars).
// Other lines are ignored. A reader may see an empty or half-written file, or (for a moment) stale bytes after
// the first line; it keeps the last good record until the next read, and only complete lines count. Any program
// can write it, e.g. Python: pathlib.Path(os.environ["DDPRUN_PROGRESS_FILE"]).write_text(f"{step}\n").
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ddprun {

/// Environment variable naming the progress file.
inline constexpr const char* kProgressFileEnv = "DDPRUN_PROGRESS_FILE";

/// One report.
struct ProgressRecord {
  int64_t step = 0;                                     ///< global step
  std::optional<int64_t> samples;                       ///< cumulative samples of this rank in this run, when reported
  std::string phase;                                    ///< "" when not reported
  std::optional<double> busySeconds;                    ///< cumulative busy seconds, when reported
  std::vector<std::pair<std::string, double>> scalars;  ///< "name=value" lines, in file order
};

/// The most scalars one report carries (the rest are ignored).
inline constexpr size_t kMaxProgressScalars = 8;

/// The text of `record` in the format above ("<step>\n" or "<step>\n<samples> <phase>\n", then the scalars).
std::string formatProgress(const ProgressRecord& record);

/// Parses a progress file's content; nullopt when line 1 is not a complete decimal number followed by a
/// newline (empty, half-written or foreign content). A malformed line 2 is ignored (step only).
std::optional<ProgressRecord> parseProgress(const std::string& content);

/// Reads and parses the file at `path` (one read of at most 1 KiB); nullopt when it is missing, empty, not (yet)
/// complete, or not a regular file. Never blocks and never follows a symbolic link: the file belongs to a
/// worker, which must not be able to stall its reader with a FIFO or point it elsewhere.
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
