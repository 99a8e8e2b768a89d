#include "launcher/status/status_handler.hpp"

#include <exception>

#include "launcher/status/metrics_text.hpp"
#include "launcher/status/snapshot_json.hpp"
#include "launcher/status/status_page.hpp"

namespace ddprun::status {
namespace {

constexpr const char* kTextType = "text/plain; charset=utf-8";

StatusResponse plain(unsigned status, std::string message) { return {status, kTextType, message + "\n", ""}; }

/// The path of `target` without its query; "" when it is neither origin form nor absolute form.
std::string_view pathOf(std::string_view target) {
  for (std::string_view scheme : {"http://", "https://"}) {
    if (target.substr(0, scheme.size()) == scheme) {
      size_t slash = target.find('/', scheme.size());
      target = slash == std::string_view::npos ? "/" : target.substr(slash);
    }
  }
  if (target.empty() || target.front() != '/') return {};
  return target.substr(0, target.find_first_of("?#"));
}

}  // namespace

StatusResponse handleStatusRequest(std::string_view method, std::string_view target, const SnapshotSource& snapshot) {
  std::string_view path = pathOf(target);
  if (path.empty()) return plain(400, "bad request target: expected a path such as /status.json");
  if (method != "GET" && method != "HEAD") {
    StatusResponse response = plain(405, "method not allowed: use GET");
    response.allow = "GET, HEAD";
    return response;
  }
  if (path == "/" || path == "/index.html") return {200, "text/html; charset=utf-8", std::string(statusPageHtml()), ""};
  if (path != "/status.json" && path != "/metrics") {
    return plain(404, "not found: " + std::string(path) + " (try /, /status.json or /metrics)");
  }
  try {
    AgentSnapshot s = snapshot();
    if (path == "/metrics") return {200, kMetricsContentType, formatMetrics(s), ""};
    return {200, "application/json", snapshotToJson(s).dump() + "\n", ""};
  } catch (const std::exception& e) {
    return plain(500, std::string("cannot take the agent's snapshot: ") + e.what());
  }
}

}  // namespace ddprun::status
