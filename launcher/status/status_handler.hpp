#pragma once
// What each URL of the status page answers, apart from any socket (after the Asio HTTP server example's
// request_handler): GET /status.json, /metrics and / ; other paths 404, other methods 405, a target that
// is not a path 400. The HTTP mechanics live in status_server/http_connection.
#include <functional>
#include <string>
#include <string_view>

#include "launcher/status/agent_snapshot.hpp"

namespace ddprun::status {

/// Takes a snapshot of the agent; called on the agent's thread, at most once per request.
using SnapshotSource = std::function<AgentSnapshot()>;

/// One HTTP answer.
struct StatusResponse {
  unsigned status = 200;    ///< HTTP status code
  std::string contentType;  ///< value of Content-Type
  std::string body;
  std::string allow;  ///< value of Allow (405 only); "" for none
};

/// Answers `method` (e.g. "GET") on `target` (origin form "/path?query"; absolute form
/// "http://host/path" is reduced to its path). HEAD is answered like GET; the caller drops the body.
/// Asks `snapshot` only for /status.json and /metrics; when it throws, the answer is 500 naming the error.
StatusResponse handleStatusRequest(std::string_view method, std::string_view target, const SnapshotSource& snapshot);

}  // namespace ddprun::status
