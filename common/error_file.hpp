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

/// Reads an error file written by us or by PyTorch's `@record`, as a file the worker controls (never blocking,
/// never following a link, at most 16 MiB). Returns nullopt when there is no regular file at `path`; throws
/// DataError naming the file when it is not valid torchelastic JSON.
std::optional<WorkerErrorRecord> readErrorFile(const std::string& path);

}  // namespace ddprun
