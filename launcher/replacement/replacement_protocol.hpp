#pragma once
// The agent's side of ddprun's rank-replacement protocol (version 1; the keys: common/rank_replacement_keys.hpp, the
// workers' side: worker/rank_replacement.hpp) over any store::Store. Blocking store calls: the agent runs them on a
// StoreLane, never on its loop.
#include <atomic>
#include <chrono>
#include <string>

#include "store/store.hpp"

namespace ddprun::launcher {

/// What claimReplacement() got: the generation announced, or why none was.
struct ReplacementClaim {
  int generation = 0;
  std::string refusal;  ///< "" when claimed
};

/// Takes the job's replacement lock as `holder` (one replacement at a time in the whole job, whichever node's rank
/// failed), counts the attempt's next communicator generation and announces it for `globalRank`, the key the
/// survivors wait for. Refused (the lock freed) while the current generation has not formed: generation 0 forms
/// when rank 0's first group is made (the worker writes its formed key), a later one when its state was sent.
/// Throws the store's errors.
ReplacementClaim claimReplacement(store::Store& store, int attempt, const std::string& holder, int globalRank);

/// Waits with the store's WAIT, `slice` at a time, until `generation` formed (the key the rank that sent its state
/// writes) or `wanted` no longer holds `generation`; frees the lock once formed. True when formed. Throws the store's
/// errors.
bool awaitFormed(store::Store& store, int attempt, int generation, const std::string& holder,
                 std::chrono::milliseconds slice, const std::atomic<int>& wanted);

}  // namespace ddprun::launcher
