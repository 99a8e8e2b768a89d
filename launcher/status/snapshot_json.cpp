#include "launcher/status/snapshot_json.hpp"

#include <string.h>

#include <cmath>

namespace ddprun::status {
namespace {
using nlohmann::json;

template <typename T>
json orNull(const std::optional<T>& value) {
  return value ? json(*value) : json(nullptr);
}

/// "SIGKILL" for 9; null for no signal or a number glibc does not name.
json signalName(const std::optional<int>& signal) {
  const char* name = signal ? ::sigabbrev_np(*signal) : nullptr;
  return name ? json(std::string("SIG") + name) : json(nullptr);
}

json scalarsToJson(const std::vector<std::pair<std::string, double>>& scalars) {
  json object = json::object();
  for (const auto& [name, value] : scalars) object[name] = std::isfinite(value) ? json(value) : json(nullptr);
  return object;
}

}  // namespace

json culpritToJson(const Culprit& c) {
  return {
      {"rank", c.rank},
      {"local_rank", c.localRank},
      {"cause", c.cause},
      {"exit_code", orNull(c.exitCode)},
      {"signal", orNull(c.signal)},
      {"signal_name", signalName(c.signal)},
      {"message", c.message},
      {"stacks", c.stacksFile.empty() ? json(nullptr) : json(c.stacksFile)},
      {"flight_recorder", c.flightRecorderDump.empty() ? json(nullptr) : json(c.flightRecorderDump)},
      {"error_file", c.errorFile.empty() ? json(nullptr) : json(c.errorFile)},
      {"traceback", c.traceback.empty() ? json(nullptr) : json(c.traceback)},
      {"stderr_tail", c.stderrTailFile.empty() ? json(nullptr) : json(c.stderrTailFile)},
  };
}

namespace {

json rankToJson(const RankSnapshot& r) {
  return {
      {"local_rank", r.localRank},
      {"global_rank", r.globalRank},
      {"pid", r.pid},
      {"state", r.state},
      {"step", orNull(r.step)},
      {"phase", r.phase},
      {"steps_per_second", r.stepsPerSecond},
      {"samples_per_second", orNull(r.samplesPerSecond)},
      {"steps_total", r.stepsTotal},
      {"scalars", scalarsToJson(r.scalars)},
      {"step_rate_history", r.stepRateHistory},
      {"progress_age_s", orNull(r.progressAgeSeconds)},
      {"output_age_s", orNull(r.outputAgeSeconds)},
      {"exit_code", orNull(r.exitCode)},
      {"signal", orNull(r.signal)},
      {"signal_name", signalName(r.signal)},
      {"hung", r.hung},
      {"straggler", r.straggler},
      {"output_held", r.outputHeld},
      {"suspected", r.suspected},
  };
}

json replacementToJson(const Replacement& r) {
  return {
      {"unix_ms", r.unixMs},
      {"rank", r.rank},
      {"generation", r.generation},
      {"formed_unix_ms", orNull(r.formedUnixMs)},
      {"failed", r.failed ? culpritToJson(*r.failed) : json(nullptr)},
  };
}

json attemptToJson(const AttemptRecord& a) {
  json culprits = json::array();
  for (const Culprit& c : a.culprits) culprits.push_back(culpritToJson(c));
  json replacements = json::array();
  for (const Replacement& r : a.replacements) replacements.push_back(replacementToJson(r));
  return {
      {"attempt", a.attempt},
      {"start_unix_ms", a.startUnixMs},
      {"end_unix_ms", orNull(a.endUnixMs)},
      {"reason", a.reason},
      {"ranks", a.ranks},
      {"best_step", orNull(a.bestStep)},
      {"culprits", culprits},
      {"replacements", replacements},
  };
}

json storeToJson(const std::optional<StoreStats>& store) {
  if (!store) return nullptr;
  return {{"connections", store->connections}, {"keys", store->keys}, {"operations", store->operations}};
}

json endToJson(const std::optional<JobEnd>& end) {
  if (!end) return nullptr;
  return {{"unix_ms", end->unixMs}, {"exit_code", end->exitCode}, {"how", end->how}};
}

}  // namespace

json snapshotToJson(const AgentSnapshot& s) {
  json ranks = json::array();
  for (const RankSnapshot& r : s.ranks) ranks.push_back(rankToJson(r));
  json attempts = json::array();
  for (const AttemptRecord& a : s.attempts) attempts.push_back(attemptToJson(a));
  return {
      {"run_id", s.runId},
      {"node", s.node},
      {"role", s.role},
      {"group_rank", s.groupRank},
      {"nodes", s.nodes},
      {"round", s.round},
      {"attempt", s.attempt},
      {"restarts_used", s.restartsUsed},
      {"max_restarts", s.maxRestarts},
      {"state", s.state},
      {"stop_reason", s.stopReason},
      {"world_size", s.worldSize},
      {"start_unix_ms", s.startUnixMs},
      {"snapshot_unix_ms", s.snapshotUnixMs},
      {"ranks", ranks},
      {"store", storeToJson(s.store)},
      {"attempts", attempts},
      {"last_failure", s.lastFailure},
      {"last_failure_unix_ms", orNull(s.lastFailureUnixMs)},
      {"hang_timeout_s", orNull(s.hangTimeoutSeconds)},
      {"ended", endToJson(s.ended)},
      {"counters",
       {{"hangs_detected", s.counters.hangsDetected},
        {"stragglers_flagged", s.counters.stragglersFlagged},
        {"spins_reported", s.counters.spinsReported},
        {"restarts", s.counters.restarts},
        {"restarts_by_reason", s.counters.restartsByReason},
        {"rank_replacements", s.counters.rankReplacements}}},
  };
}

}  // namespace ddprun::status
