#pragma once
// The store keys of ddprun's rank-replacement protocol (version 1), shared by the launcher, which writes the
// announcement, and the worker, which answers (worker/rank_replacement.hpp describes the protocol). They live in
// the attempt's key space of the workers' store: "/worker/attempt_<n>/" + key.
#include <string>
#include <string_view>

namespace ddprun {

/// The ELF section whose presence tells ddprun that a program supports rank replacement.
inline constexpr const char* kRankReplaceSection = ".ddprun_rank_replace";

/// Written by ddprun before it starts a replacement in communicator generation `g` (value: the replaced global rank).
inline std::string generationKey(int g) { return "ddprun_generation_" + std::to_string(g); }
/// Written by the rank that sent its state, once generation `g` formed and every rank has the state; for generation 0
/// by rank 0 once the attempt's first group is made. ddprun replaces a rank only into the generation after a formed
/// one.
inline std::string generationFormedKey(int g) { return "ddprun_generation_" + std::to_string(g) + "_formed"; }
/// Written by a rank of generation `g` (value: its global rank) whose collective ran past the timeout with no rank
/// lost (a rank stopped, hung or unreachable): no replacement can form, and ddprun restarts the whole group instead.
inline std::string generationTimedOutKey(int g) { return "ddprun_generation_" + std::to_string(g) + "_timed_out"; }
/// Held by the agent whose replacement is forming (compare-and-set from ""; "" again once it formed): replacements
/// on several nodes never overlap. Agents only; the workers never read it.
inline constexpr const char* kReplacingKey = "ddprun_replacing";
/// The generations announced so far in the attempt (ADD): the next one's number.
inline constexpr const char* kGenerationCounterKey = "ddprun_generation_counter";

/// Where those keys are at the root of the workers' store, for attempt `attempt`: as a TCPStore client under the
/// attempt's PrefixStore sends them (c10d's TCPStore puts its own "/" before every key: TCPStore.hpp, keyPrefix_).
inline constexpr std::string_view kAttemptKeyPrefix = "//worker/attempt_";
inline std::string attemptKey(int attempt, const std::string& key) {
  return std::string(kAttemptKeyPrefix) + std::to_string(attempt) + "/" + key;
}

}  // namespace ddprun
