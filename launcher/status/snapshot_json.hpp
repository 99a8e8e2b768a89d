#pragma once
// The /status.json document: an AgentSnapshot as JSON with snake_case keys. Absent optional values are
// null; docs/status.md lists every field.
#include <nlohmann/json.hpp>

#include "launcher/status/agent_snapshot.hpp"

namespace ddprun::status {

/// The snapshot as the JSON object that /status.json serves. Non-finite numbers become null.
nlohmann::json snapshotToJson(const AgentSnapshot& snapshot);

/// One culprit as /status.json's `attempts[].culprits[]` and attempts.jsonl's `culprits` list it.
nlohmann::json culpritToJson(const Culprit& culprit);

}  // namespace ddprun::status
