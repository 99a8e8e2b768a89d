#pragma once
// How the ranks of a job form the shm backend through the store: who shares a host (each rank's node key),
// one segment per host made by its lowest rank and announced by name, and the leaders' Gloo group when the
// job spans several hosts. Store keys (under the store's own prefix): "shm/node/<rank>" = the rank's node key
// (only when LOCAL_WORLD_SIZE < WORLD_SIZE), "shm/segment/<node index>" = "<name> <bytes> <nonce>", and the
// leaders' Gloo keys under "shm/leaders".
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <string>

#include "worker/comm/communicator.hpp"
#include "worker/comm/dist_env.hpp"
#include "worker/comm/placement.hpp"
#include "worker/comm/shm_group.hpp"

namespace ddprun::worker {

/// One rank's part in forming the group.
struct ShmMember {
  int rank = 0;
  int worldSize = 1;
  std::string nodeKey;                ///< ranks with equal keys share a host (and its /dev/shm)
  bool allOnOneNode = true;           ///< known without asking the store (LOCAL_WORLD_SIZE == WORLD_SIZE)
  bool glooIfOneRankPerNode = false;  ///< --backend auto: plain Gloo when no host has two ranks
  std::string runId = "none";         ///< names the segment (common/shm_names.hpp)
  int attempt = 0;
  std::string masterAddr = "127.0.0.1";  ///< for the leaders' Gloo group
  ShmGroupOptions options;               ///< timeout (store, attach, collectives), spin, slot size
};

/// Forms `member`'s communicator over `store`: shm, shm+gloo over several hosts, or Gloo (see
/// ShmMember::glooIfOneRankPerNode). Blocks until the group has formed. Throws CollectiveError when a rank
/// does not attach in time, Error for a segment that cannot be made or used, c10::Error from the store.
std::unique_ptr<Communicator> formShmCommunicator(const c10::intrusive_ptr<c10d::Store>& store,
                                                  const ShmMember& member);

/// formShmCommunicator for this process: the store from the environment (store_bootstrap.hpp), node key =
/// GROUP_RANK (else the host name), run id and attempt from TORCHELASTIC_RUN_ID and _RESTART_COUNT.
std::unique_ptr<Communicator> makeShmCommunicator(const DistEnv& env, const Placement& placement,
                                                  std::chrono::milliseconds timeout);

}  // namespace ddprun::worker
