#pragma once
// Names of the worker's POSIX shared-memory segments (the shm backend), and the launcher's clean-up of a
// launch's leftovers. A segment of key K, attempt A is the file /dev/shm/<prefix(K)>a<A>-<32 hex digits>, where
// prefix(K) = "ddprun-shm-" + K with every byte outside [A-Za-z0-9_.] written as %XX ("%%" + a 16-hex-digit
// hash for keys longer than 64 bytes), + "-". The escaping keeps '-' out of the key, so no key's prefix is a
// prefix of another key's names. The key is the launch token ddprun gives its workers (DDPRUN_LAUNCH_TOKEN:
// random, one per run of ddprun), so that jobs sharing a host, whatever their run ids, never touch each other's
// segments; a worker started without ddprun uses its run id (TORCHELASTIC_RUN_ID), and nothing cleans up after it. The
// worker unlinks a segment as soon as every rank has mapped it; only a worker killed during the group's start leaves
// one behind, which removeShmSegments() then finds. LibTorch-free, for the launcher too.
#include <optional>
#include <string>
#include <vector>

namespace ddprun {

/// Where POSIX shared memory lives on Linux (shm_open("/name") is /dev/shm/name).
inline constexpr const char* kShmDir = "/dev/shm";

/// The variable carrying ddprun's launch token to its workers.
inline constexpr const char* kLaunchTokenEnv = "DDPRUN_LAUNCH_TOKEN";

/// "ddprun-shm-<escaped run id>-": the start of every segment name of run `runId` (TORCHELASTIC_RUN_ID).
std::string shmRunPrefix(const std::string& runId);

/// The segment file name for run `runId`, attempt `attempt` (TORCHELASTIC_RESTART_COUNT) and a random
/// suffix `randomHex` (32 lower-case hex digits).
std::string shmSegmentName(const std::string& runId, int attempt, const std::string& randomHex);

/// What removeShmSegments() did.
struct ShmCleanup {
  std::vector<std::string> removed;  ///< file names removed
  std::vector<std::string> errors;   ///< one line per name that matched but could not be removed
};

/// Removes the segments of run `runId` left in `dir` (default /dev/shm): all attempts, or only `attempt`.
/// Only regular files owned by this process's effective user are touched; a segment still mapped by a
/// running worker stays usable by it (only its name goes). Never throws; a `dir` that cannot be read is one
/// entry in `errors`. Call it after a worker group has stopped, before the next attempt starts.
ShmCleanup removeShmSegments(const std::string& runId, std::optional<int> attempt = std::nullopt,
                             const std::string& dir = kShmDir);

}  // namespace ddprun
