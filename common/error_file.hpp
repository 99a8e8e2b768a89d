#pragma once
// torchelastic's worker error file: the JSON that PyTorch's `@record` decorator writes to
// $TORCHELASTIC_ERROR_FILE when a worker dies of an uncaught exception. Format from PyTorch 1.13
// torch/distributed/elastic/multiprocessing/errors/error_handler.py (ErrorHandler.record_exception):
//   {"message": {"message": "<Type>: <text>",
//                "extraInfo": {"py_callstack": "<trace>", "timestamp": "<unix seconds>"}}}
#include <cstdint>
#include <optional>
#include <string>

namespace ddprun {

/// One worker failure as recorded in an error file.
struct WorkerErrorRecord {
  std::string message;    ///< "<Type>: <text>", as Python's f"{type(e).__name__}: {e}"
  std::string callstack;  ///< free text; a C++ worker has no Python stack, so it says where it failed
  int64_t timestamp = 0;  ///< seconds since the Unix epoch
};

/// Serialises `record` in torchelastic's layout (see the file comment).
std::string toErrorFileJson(const WorkerErrorRecord& record);

/// Writes `record` to `path` atomically. Throws IoError naming the file.
void writeErrorFile(const std::string& path, const WorkerErrorRecord& record);

/// The largest error file read: far above any traceback Python prints (it folds repeated frames), small enough that
/// parsing it costs the agent's loop well under 100 ms (tools/bench/error_file_bench.sh).
inline constexpr size_t kMaxErrorFileBytes = 1u << 20;
/// JSON nesting read in an error file (torchelastic's has 3 levels) and values in it (it has 3): beyond either the
/// file is refused before it costs memory or time.
inline constexpr int kMaxErrorFileDepth = 16;
inline constexpr size_t kMaxErrorFileValues = 4096;
/// Timestamps outside [1, this] (9999-12-31T23:59:59Z) are ignored: no calendar prints them.
inline constexpr int64_t kMaxErrorFileTimestamp = 253402300799;

/// Reads an error file written by us or by PyTorch's `@record`, as a file the worker controls: never blocking,
/// never following a link, at most kMaxErrorFileBytes, streamed (no document tree is built), nesting and value
/// count bounded, only the fields above kept. Returns nullopt when there is no regular file at `path`; throws
/// DataError naming the file and what is wrong when it is too large, too deep or not torchelastic JSON.
std::optional<WorkerErrorRecord> readErrorFile(const std::string& path);

}  // namespace ddprun
