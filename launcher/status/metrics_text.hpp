#pragma once
// The /metrics document: an AgentSnapshot in the Prometheus text exposition format 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/): one "# HELP" and one "# TYPE" line per
// metric family, then its samples, label values escaped. docs/status.md lists the metric names.
#include <string>

#include "launcher/status/agent_snapshot.hpp"

namespace ddprun::status {

/// The content type /metrics is served with.
inline constexpr const char* kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

/// The snapshot as Prometheus text. Families without a sample (no rank reported a step yet, no store on
/// this node) are left out.
std::string formatMetrics(const AgentSnapshot& snapshot);

/// `value` with backslash, double quote and newline escaped, as a label value must be.
std::string escapeLabelValue(const std::string& value);

}  // namespace ddprun::status
