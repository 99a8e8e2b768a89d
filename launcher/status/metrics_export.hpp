#pragma once
// A job's end for Prometheus, the way batch jobs report there (https://prometheus.io/docs/practices/instrumentation/
// #batch-jobs): the final /metrics document, written atomically for node_exporter's textfile collector
// (--metrics-textfile, a *.prom file in its --collector.textfile.directory) and/or PUT to a Pushgateway
// (--metrics-push; the group's path as https://github.com/prometheus/pushgateway documents it). A live scrape cannot
// see the end: ddprun exits with the job.
#include <chrono>
#include <cstdint>
#include <string>

#include "launcher/status/agent_snapshot.hpp"

namespace ddprun::status {

/// Where --metrics-push sends the final metrics: http://HOST[:PORT][/PATH].
struct PushTarget {
  std::string host;
  std::string port = "80";
  std::string path;  ///< "" or "/": the group /metrics/job/ddprun/instance/<node> is added
};

/// Parses --metrics-push's URL. Throws std::invalid_argument saying what is wrong (https is not spoken).
PushTarget parsePushUrl(const std::string& url);

/// Writes `text` to `path` through a temporary file beside it and a rename (node_exporter never reads half a file;
/// the temporary name does not end in .prom). Throws IoError naming the file.
void writeMetricsTextfile(const std::string& path, const std::string& text);

/// PUTs `text` (exposition format 0.0.4) to `target`, replacing the group's metrics; `node` names the instance when
/// the URL gives no path. Gives up after `timeout` in all. Throws Error saying what failed (no answer, an HTTP error
/// with the body's first line).
void pushMetrics(const PushTarget& target, const std::string& node, const std::string& text,
                 std::chrono::milliseconds timeout);

/// Writes and pushes the final snapshot as asked (empty: not asked); a failure is one warning each, never fatal.
void exportFinalMetrics(const AgentSnapshot& final, const std::string& textfile, const std::string& pushUrl);

}  // namespace ddprun::status
