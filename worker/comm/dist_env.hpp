#pragma once
// The torchrun environment contract as seen by one worker (PyTorch 1.13
// torch/distributed/elastic/agent/server/local_elastic_agent.py sets these variables).
#include <string>

namespace ddprun::worker {

/// What the launcher told this worker. Without the variables it describes a single process
/// (rank 0 of world size 1), like a plain PyTorch script.
struct DistEnv {
  int rank = 0;                          ///< RANK: global rank in the worker group
  int worldSize = 1;                     ///< WORLD_SIZE
  int localRank = 0;                     ///< LOCAL_RANK: index on this node (selects cuda:LOCAL_RANK)
  int localWorldSize = 1;                ///< LOCAL_WORLD_SIZE
  int groupRank = -1;                    ///< GROUP_RANK: this node's rank among the nodes; -1 when unset
  std::string masterAddr = "127.0.0.1";  ///< MASTER_ADDR: host of the c10d store
  int masterPort = 29500;                ///< MASTER_PORT
  int restartCount = 0;                  ///< TORCHELASTIC_RESTART_COUNT: the attempt number, 0 first
  bool useAgentStore = false;            ///< TORCHELASTIC_USE_AGENT_STORE: the launcher hosts the store
  std::string errorFile;                 ///< TORCHELASTIC_ERROR_FILE, empty when unset
  std::string runId = "none";            ///< TORCHELASTIC_RUN_ID: the job's id (torchrun's default is "none")
  /// DDPRUN_RESTART_SCOPE=rank: ddprun replaces a failed rank in place (docs/worker.md, "Rank replacement").
  bool replaceableRanks = false;
  /// DDPRUN_COMM_GENERATION: the communicator generation this process starts in (0: the attempt's first; a
  /// replacement rank starts in a later one and receives the training state from a survivor).
  int commGeneration = 0;

  bool distributed() const { return worldSize > 1; }

  /// Reads the variables above. Throws ConfigError naming a variable with a malformed value, a rank
  /// outside [0, WORLD_SIZE), or a missing MASTER_ADDR/MASTER_PORT when WORLD_SIZE > 1.
  static DistEnv fromEnvironment();
};

}  // namespace ddprun::worker
