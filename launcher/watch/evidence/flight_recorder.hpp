#pragma once
// NCCL's flight recorder (torch 2.x: torch/csrc/distributed/c10d/FlightRecorder.cpp and ProcessGroupNCCL.cpp): every
// rank keeps its last collectives in a ring buffer and, asked to, writes them to <dump prefix><rank>. It is the
// first thing engineers read after an NCCL hang. ddprun points the dumps into the attempt's directory and, on a
// hang, asks every rank for one before anything is killed, in the two ways torch listens:
// - the rank's pipe, <pipe prefix><rank>.pipe: a FIFO torch creates (and reads, non-blocking) when
//   TORCH_NCCL_DEBUG_INFO_PIPE_FILE is set and TORCH_NCCL_TRACE_BUFFER_SIZE > 0; one byte written asks for a dump;
// - the key "exception_dump" at the root of the store (outside any prefix, "/exception_dump" on the wire; its value
//   the signalling rank as a 4-byte int), which the heartbeat monitor of every rank checks about once a second
//   (TORCH_NCCL_COORD_CHECK_MILSEC).
// torch 1.13 and the CPU backends know none of this: the variables are ignored and no pipe appears.
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ddprun::launcher {

/// The variables ddprun sets for the flight recorder (unless the user's environment has them).
inline constexpr const char* kDumpFileEnv = "TORCH_FR_DUMP_TEMP_FILE";  ///< torch >= 2.5
inline constexpr const char* kLegacyDumpFileEnv = "TORCH_NCCL_DEBUG_INFO_TEMP_FILE";
inline constexpr const char* kDumpPipeEnv = "TORCH_NCCL_DEBUG_INFO_PIPE_FILE";
inline constexpr const char* kTraceBufferEnv = "TORCH_NCCL_TRACE_BUFFER_SIZE";  ///< the pipe needs it > 0
inline constexpr const char* kTraceBufferNewEnv = "TORCH_FR_BUFFER_SIZE";
inline constexpr const char* kDumpOnTimeoutEnv = "TORCH_NCCL_DUMP_ON_TIMEOUT";  ///< also dump on NCCL's own timeout
/// The store key every NCCL rank polls (ProcessGroupNCCL.cpp's EXCEPTION_DUMP, "exception_dump"), as it travels on the
/// wire and sits in the store: torch's TCPStore client puts "/" before every key it sends (TCPStore.cpp, keyPrefix_),
/// so the key torch checks at the root of its store is "/exception_dump".
inline constexpr const char* kDumpStoreKey = "/exception_dump";
/// The keys torch's ProcessGroupNCCL writes at the root of its store, as they sit there ("/" + name): the dump
/// request, its torch 2.2-2.3 name (TIMEOUT_DUMP, "timeout_dump") and the error broadcast of
/// TORCH_NCCL_PROPAGATE_ERROR (kStoreErrorSignalKey, "remote_error"). None may reach the next attempt: each makes
/// every new NCCL rank dump or abort.
inline const std::vector<std::string>& torchRootStoreKeys() {
  static const std::vector<std::string> keys{kDumpStoreKey, "/timeout_dump", "/remote_error"};
  return keys;
}

/// Where one rank's flight recorder writes and listens.
struct FlightRecorderFiles {
  std::string dumpPrefix;  ///< TORCH_FR_DUMP_TEMP_FILE (torch appends the rank)
  std::string dumpFile;    ///< <dumpPrefix><rank>
  std::string pipePrefix;  ///< TORCH_NCCL_DEBUG_INFO_PIPE_FILE
  std::string pipeFile;    ///< <pipePrefix><rank>.pipe
};

/// The files of global rank `rank` whose log directory is `rankDir`, honouring what `userEnv` (ddprun's own
/// environment) already sets.
FlightRecorderFiles flightRecorderFiles(const std::string& rankDir, int rank,
                                        const std::function<std::optional<std::string>(const char*)>& userEnv);

/// The variables to add to a rank's environment for `files` (none that `userEnv` sets already).
std::map<std::string, std::string> flightRecorderEnvironment(
    const FlightRecorderFiles& files, const std::function<std::optional<std::string>(const char*)>& userEnv);

/// The value of kDumpStoreKey: `rank` as torch reads it (4 bytes, host order).
std::string dumpKeyValue(int rank);

/// Writes one byte into the FIFO at `pipe`: non-blocking, never following a link, only into a FIFO that has a
/// reader. Returns whether a rank was asked.
bool pokeDumpPipe(const std::string& pipe);

/// One rank's dump file while ddprun waits for it. torch writes one dump per request, and a rank that both the pipe
/// and the store key reach may write two: the later one truncates and rewrites the same file (ProcessGroupNCCL.cpp,
/// dumpDebuggingInfo: "User is responsible for preserving the output file from an earlier call before a later call
/// overwrites it"). A stop during that rewrite would leave a cut-off dump, so a dump counts as complete only once
/// the file has held still (same inode, size and modification time) for a quiet period longer than the gap between
/// the two requests' writes. A file that was there when the dump was asked for (the user's own dump path, or an
/// earlier dump on NCCL's own timeout) is no answer until it changes.
class DumpFileWatch {
 public:
  /// Starts watching `file`, taking what is there now as the state before the request.
  explicit DumpFileWatch(std::string file);

  /// Looks at the file at `now` (steady clock); true once it is a non-empty regular file, other than the one there
  /// before the request, that has not changed for `quiet`.
  bool settled(std::chrono::steady_clock::time_point now, std::chrono::milliseconds quiet);
  /// Whether the last look found a non-empty regular file written since the request.
  bool written() const { return last_.size > 0 && !(last_ == before_); }
  /// Whether the last look found only the non-empty file that was there before the request.
  bool onlyOlder() const { return last_.size > 0 && last_ == before_; }
  const std::string& file() const { return file_; }

 private:
  struct Look {
    unsigned long long inode = 0;
    long long size = -1;  ///< -1: missing, or not a regular file
    long long mtimeNs = 0;
    bool operator==(const Look& other) const {
      return inode == other.inode && size == other.size && mtimeNs == other.mtimeNs;
    }
  };
  static Look lookAt(const std::string& file);
  std::string file_;
  Look before_;  ///< the file when the watch began
  Look last_;
  std::optional<std::chrono::steady_clock::time_point> since_;  ///< when the file was first seen as `last_`
};

}  // namespace ddprun::launcher
