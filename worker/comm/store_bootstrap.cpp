#include "worker/comm/store_bootstrap.hpp"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "common/error.hpp"

namespace ddprun::worker {

c10::intrusive_ptr<c10d::Store> connectAttemptStore(const DistEnv& env, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;  // assigned by name: 2.x appends fields
  options.port = static_cast<uint16_t>(env.masterPort);
  options.isServer = !env.useAgentStore && env.rank == 0;
  options.numWorkers = static_cast<size_t>(env.worldSize);
  options.waitWorkers = false;
  options.timeout = timeout;
  options.multiTenant = true;
  c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::TCPStore>(env.masterAddr, options);
  if (env.useAgentStore) {
    // torch/distributed/rendezvous.py: every attempt gets its own key space in the agent's store.
    store = prefixed("/worker/attempt_" + std::to_string(env.restartCount), store);
  }
  return store;
}

c10::intrusive_ptr<c10d::Store> connectStore(const DistEnv& env, std::chrono::milliseconds timeout) {
  c10::intrusive_ptr<c10d::Store> store = connectAttemptStore(env, timeout);
  // A replaced rank's generation forms its group in a key space of its own (and so a new shm segment).
  if (env.commGeneration > 0) store = prefixed("generation_" + std::to_string(env.commGeneration), store);
  return prefixed("default_pg", store);
}

c10::intrusive_ptr<c10d::Store> prefixed(const std::string& prefix, const c10::intrusive_ptr<c10d::Store>& store) {
  return c10::make_intrusive<c10d::PrefixStore>(prefix, store);
}

std::string groupFormationError(const DistEnv& env, std::chrono::milliseconds timeout, const std::string& cause) {
  // c10d's own messages ("Socket Timeout") do not say what was being waited for.
  return "could not form the process group of " + std::to_string(env.worldSize) + " ranks through the store at " +
         env.masterAddr + ":" + std::to_string(env.masterPort) + " within " + std::to_string(timeout.count() / 1000) +
         " s (a rank missing or dead?): " + firstLine(cause);
}

}  // namespace ddprun::worker
