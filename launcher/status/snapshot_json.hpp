#pragma once
// The /status.json document: an AgentSnapshot as JSON with snake_case keys. Absent optional values are
// null; docs/status.md lists every field.
#include <nlohmann/json.hpp>

#include "launcher/status/agent_snapshot.hpp"

namespace ddprun::status {

/// The snapshot as the JSON object that /status.json serves. Non-finite numbers become null.
nlohmann::json snapshotToJson(const AgentSnapshot& snapshot);

}  // namespace ddprun::status
