#pragma once
// Builds the communicator that a rank's placement names: none for one process without --backend, else the
// backend's own (comm/backends.hpp's table), connected through the store as env:// would.
#include <chrono>
#include <memory>

#include "worker/comm/communicator.hpp"
#include "worker/comm/dist_env.hpp"
#include "worker/comm/placement.hpp"

namespace ddprun::worker {

/// The communicator for `placement`. Without `placement.processGroup` nothing is contacted (a one-process
/// "group" whose collectives do nothing). Otherwise connects to the store (store_bootstrap.hpp) and forms
/// the backend's group; `timeout` bounds the store, the group's formation and every collective. Throws
/// ddprun::Error naming the store address when peers do not come; NCCL's own errors surface from the first
/// collective.
std::unique_ptr<Communicator> makeCommunicator(const DistEnv& env, const Placement& placement,
                                               std::chrono::milliseconds timeout);

}  // namespace ddprun::worker
