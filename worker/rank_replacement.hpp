#pragma once
// Rank replacement, protocol version 1 (ddprun --restart-scope rank; docs/worker.md, "Rank replacement"):
//  1. ddprun sets DDPRUN_RESTART_SCOPE=rank in every rank. A program that supports the protocol links
//     rank_replacement.cpp, whose ELF section ".ddprun_rank_replace" ddprun looks for before it starts anything.
//  2. When one rank fails, ddprun writes the key "ddprun_generation_<g>" (value: the replaced global rank) into
//     the attempt's key space of its store ("/worker/attempt_<n>/", connectAttemptStore) and starts the new
//     rank with DDPRUN_COMM_GENERATION=<g>. The survivors' collectives fail (their peer is gone); each waits
//     for that key, at most the collective timeout, and leaves the failed group.
//  3. Every rank forms generation g's group in the key space "generation_<g>" (store_bootstrap.hpp).
//  4. The state moves (syncTrainingState): each rank tells its completed step (the new rank: none), and the
//     lowest rank among those furthest along broadcasts its training state (the tensors a checkpoint holds:
//     parameters and buffers, optimizer momentum, progress, the CPU generator) into every rank's own; ranks behind
//     it take it, and the sender writes "ddprun_generation_<g>_formed". Training goes on from that
//     step: only the step in flight is computed again. (Keys: common/rank_replacement_keys.hpp.)
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/rank_replacement_keys.hpp"
#include "worker/comm/communicator.hpp"
#include "worker/comm/dist_env.hpp"
#include "worker/comm/placement.hpp"

namespace ddprun::worker {

/// A survivor's way to the next generation's group.
class GroupReplacer {
 public:
  virtual ~GroupReplacer() = default;
  /// Waits for ddprun's announcement of the generation after the current one, forms its group and returns it.
  /// Throws ddprun::Error when none comes within the timeout (ddprun restarts the whole group instead).
  virtual std::unique_ptr<Communicator> nextGroup() = 0;
  /// The generation of the group returned last (the process's DDPRUN_COMM_GENERATION at first).
  virtual int generation() const = 0;
  /// Tells ddprun that the current generation formed and every rank has the state (called by the rank that sent
  /// it): a later failure may be replaced again.
  virtual void markFormed() = 0;
  /// Tells ddprun that a collective of the current generation timed out with no rank lost, as `rank`: a replacement
  /// would wait for the same unresponsive rank, so ddprun restarts the whole group when this rank exits.
  virtual void markTimedOut(int rank) = 0;
};

/// The real one: ddprun's announcement through the job's store, groups from makeCommunicator.
std::unique_ptr<GroupReplacer> makeStoreGroupReplacer(const DistEnv& env, const Placement& placement,
                                                      std::chrono::milliseconds timeout);

/// What one rank brings to the state exchange.
struct StateSync {
  int64_t completedSteps = -1;  ///< -1: a new rank, nothing to offer
  /// This rank's training state as tensors: the same count, shapes and dtypes on every rank, and the ones that are
  /// the state itself (parameters, optimizer buffers), not copies. The sender's values are broadcast into them.
  std::function<std::vector<torch::Tensor>()> tensors;
  /// How many of the first tensors say where the rank stands in training (progress counters, the generator) rather
  /// than hold the model's state: every rank takes the sender's, also a rank at its step, which may stand on the
  /// other side of an epoch's end (its evaluation and checkpoint come after the epoch's last step): ranks that went
  /// on from different points would run different collectives.
  size_t positionTensors = 0;
  /// Called on every rank but the sender once the tensors it takes hold the sender's values (to read back what is
  /// not a tensor of the model or optimizer: progress, the generator).
  std::function<void()> loaded;
};

/// Step 4 of the protocol over `comm` (every rank of the new generation calls it): returns the source rank.
/// Ranks already at the source's step keep their own model state (it equals the source's: DDP keeps replicas equal)
/// and take its position (StateSync::positionTensors).
int syncTrainingState(Communicator& comm, const StateSync& mine);

}  // namespace ddprun::worker
