#include "launcher/replacement/replacement_protocol.hpp"

#include "common/rank_replacement_keys.hpp"

namespace ddprun::launcher {

ReplacementClaim claimReplacement(store::Store& store, int attempt, const std::string& holder, int globalRank) {
  const std::string held = store.compareSet(attemptKey(attempt, kReplacingKey), "", holder);
  if (held != holder) return {0, "another replacement is forming (" + held + ")"};
  const int generation = static_cast<int>(store.add(attemptKey(attempt, kGenerationCounterKey), 1));
  // The survivors wait for this key; without it they would wait for nothing.
  store.set(attemptKey(attempt, generationKey(generation)), std::to_string(globalRank));
  return {generation, ""};
}

bool awaitFormed(store::Store& store, int attempt, int generation, const std::string& holder,
                 std::chrono::milliseconds slice, const std::atomic<int>& wanted) {
  const std::string formed = attemptKey(attempt, generationFormedKey(generation));
  while (wanted.load() == generation) {
    if (store.wait({formed}, slice)) {
      store.compareSet(attemptKey(attempt, kReplacingKey), holder, "");  // the next one may start
      return true;
    }
  }
  return false;
}

}  // namespace ddprun::launcher
