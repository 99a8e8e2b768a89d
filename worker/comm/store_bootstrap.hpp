#pragma once
// How a rank reaches the job's store, as torch.distributed's env:// init method does
// (torch/distributed/rendezvous.py, _env_rendezvous_handler and _create_c10d_store). Every backend that
// forms a group starts here: c10d's Gloo and NCCL exchange their addresses through it, shm its segment
// name and topology.
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>

#include "worker/comm/dist_env.hpp"

namespace ddprun::worker {

/// Connects to the store at MASTER_ADDR:MASTER_PORT. With TORCHELASTIC_USE_AGENT_STORE=True every rank is
/// a client and keys live under "/worker/attempt_<restart count>" (one key space per attempt); otherwise
/// rank 0 hosts the TCPStore there. A later communicator generation (DDPRUN_COMM_GENERATION) adds
/// "generation_<g>". The returned store is prefixed "default_pg", as the default process
/// group's is. `timeout` bounds the connection and every later get/wait. Throws c10::Error when the store
/// cannot be reached in time.
c10::intrusive_ptr<c10d::Store> connectStore(const DistEnv& env, std::chrono::milliseconds timeout);

/// The attempt's own key space of that store ("/worker/attempt_<n>" of the agent's store), unprefixed by any
/// group: where ddprun announces the next communicator generation (rank replacement).
c10::intrusive_ptr<c10d::Store> connectAttemptStore(const DistEnv& env, std::chrono::milliseconds timeout);

/// `store` with every key under `prefix` + "/" (a c10d::PrefixStore), for one sub-group or protocol.
c10::intrusive_ptr<c10d::Store> prefixed(const std::string& prefix, const c10::intrusive_ptr<c10d::Store>& store);

/// The message for a group that did not form: which store, how long, and the cause's first line.
std::string groupFormationError(const DistEnv& env, std::chrono::milliseconds timeout, const std::string& cause);

}  // namespace ddprun::worker
