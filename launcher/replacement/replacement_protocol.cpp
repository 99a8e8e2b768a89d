#include "launcher/replacement/replacement_protocol.hpp"

#include "common/log_text.hpp"
#include "common/rank_replacement_keys.hpp"

namespace ddprun::launcher {

ReplacementClaim claimReplacement(store::Store& store, int attempt, const std::string& holder, int globalRank) {
  const std::string held = store.compareSet(attemptKey(attempt, kReplacingKey), "", holder);
  if (held != holder) return {0, "another replacement is forming (" + held + ")"};
  // The survivors must be in the generation the new one follows: one whose group has not formed (a rank failed
  // while the ranks were still starting) cannot be replaced into the next, where nobody would meet it.
  const int current = static_cast<int>(store.add(attemptKey(attempt, kGenerationCounterKey), 0));
  if (!store.get(attemptKey(attempt, generationFormedKey(current)))) {
    store.compareSet(attemptKey(attempt, kReplacingKey), holder, "");
    return {0, "the ranks had not formed their group yet (generation " + std::to_string(current) + ")"};
  }
  // A rank whose collective timed out with no rank lost said so before it exited: the others wait for a rank that is
  // stopped, hung or unreachable, and would wait for it in the next generation too.
  if (const auto timedOut = store.get(attemptKey(attempt, generationTimedOutKey(current)))) {
    store.compareSet(attemptKey(attempt, kReplacingKey), holder, "");
    return {0, "rank " + printable(*timedOut, 16) + " saw a collective of generation " + std::to_string(current) +
                   " time out with no rank lost (a rank stopped, hung or unreachable?)"};
  }
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
