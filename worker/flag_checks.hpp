#pragma once
// Checks of flags against what only the running worker knows (WORLD_SIZE, its rank, the file system), done
// before the data set loads or any peer is contacted, so a flag that cannot work costs nothing and exits 2.
// LibTorch-free.
#include "worker/comm/dist_env.hpp"
#include "worker/options.hpp"

namespace ddprun::worker {

/// Throws FlagError naming the flag when:
/// - --fail-rank or --slow-rank names a rank that does not exist (>= WORLD_SIZE), or --slow-rank is given
///   without a positive --slow-step-ms;
/// - --checkpoint-dir cannot be used: on rank 0 (the writer) it cannot be created or written to; on other
///   ranks it exists but is not a readable directory;
/// - --metrics-file cannot be opened for appending on rank 0 (the only rank that writes it; the file is
///   created when missing, as the first record would create it).
void checkFlagsAgainstEnvironment(const WorkerOptions& options, const DistEnv& env);

}  // namespace ddprun::worker
