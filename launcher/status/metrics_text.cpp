#include "launcher/status/metrics_text.hpp"

#include <charconv>
#include <cmath>
#include <functional>
#include <map>
#include <utility>
#include <vector>

namespace ddprun::status {
namespace {

using Labels = std::vector<std::pair<const char*, std::string>>;

/// Shortest text that reads back as `value`; NaN and infinities as Prometheus spells them.
std::string formatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buffer[32];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, end);
}

/// Writes one metric family: its HELP and TYPE lines and its samples, or nothing when it has none.
class Family {
 public:
  Family(const char* name, const char* type, const char* help) : name_(name), type_(type), help_(help) {}

  Family& add(const Labels& labels, double value) {
    samples_ += name_;
    if (!labels.empty()) {
      samples_ += '{';
      for (size_t i = 0; i < labels.size(); ++i) {
        if (i) samples_ += ',';
        samples_ += labels[i].first;
        samples_ += "=\"" + escapeLabelValue(labels[i].second) + '"';
      }
      samples_ += '}';
    }
    samples_ += ' ' + formatValue(value) + '\n';
    return *this;
  }

  void writeTo(std::string& out) const {
    if (samples_.empty()) return;
    out += std::string("# HELP ") + name_ + ' ' + help_ + '\n';
    out += std::string("# TYPE ") + name_ + ' ' + type_ + '\n';
    out += samples_;
  }

 private:
  const char* name_;
  const char* type_;
  const char* help_;  // plain ASCII without backslash or newline: needs no escaping
  std::string samples_;
};

Labels rankLabels(const RankSnapshot& rank) {
  return {{"local_rank", std::to_string(rank.localRank)}, {"rank", std::to_string(rank.globalRank)}};
}

/// One 0/1 sample per known state, so a dashboard can sum by state; an unknown state gets its own 1.
template <size_t N>
void addStateSet(Family& family, Labels labels, const std::array<const char*, N>& states, const std::string& current) {
  labels.emplace_back("state", "");
  bool known = false;
  for (const char* state : states) {
    labels.back().second = state;
    known = known || current == state;
    family.add(labels, current == state ? 1 : 0);
  }
  if (!known) {
    labels.back().second = current;
    family.add(labels, 1);
  }
}

void writeAgentFamilies(const AgentSnapshot& s, std::string& out) {
  Family("ddprun_agent_info", "gauge", "Facts about this agent as labels; the value is always 1.")
      .add({{"run_id", s.runId}, {"node", s.node}, {"role", s.role}}, 1)
      .writeTo(out);
  Family state("ddprun_agent_state", "gauge", "1 for the agent's current state, 0 for the others.");
  addStateSet(state, {}, kAgentStates, s.state);
  state.writeTo(out);
  Family("ddprun_agent_start_time_seconds", "gauge", "When the agent started, in seconds since the Unix epoch.")
      .add({}, static_cast<double>(s.startUnixMs) / 1000)
      .writeTo(out);
  Family("ddprun_round", "gauge", "Rendezvous round.").add({}, s.round).writeTo(out);
  Family("ddprun_attempt", "gauge", "Current attempt of the worker group on this node, from 0.")
      .add({}, s.attempt)
      .writeTo(out);
  Family("ddprun_nodes", "gauge", "Nodes in the current round.").add({}, s.nodes).writeTo(out);
  Family("ddprun_world_size", "gauge", "Ranks in the whole job.").add({}, s.worldSize).writeTo(out);
  Family("ddprun_restarts_used", "gauge", "Restarts that counted against the maximum.")
      .add({}, s.restartsUsed)
      .writeTo(out);
  Family("ddprun_max_restarts", "gauge", "Restarts allowed (--max-restarts).").add({}, s.maxRestarts).writeTo(out);
  Family restarts("ddprun_restarts_total", "counter",
                  "Restarts of the worker group, counted against the maximum or not, by what ended the attempt; "
                  "reason \"replacement\": ranks replaced in place.");
  std::map<std::string, uint64_t> byReason = {{"failure", 0}, {"hang", 0}, {"membership change", 0}};
  for (const auto& [reason, count] : s.counters.restartsByReason) byReason[reason] = count;
  for (const auto& [reason, count] : byReason) restarts.add({{"reason", reason}}, static_cast<double>(count));
  restarts.writeTo(out);
  Family("ddprun_rank_replacements_total", "counter",
         "Ranks replaced in place while the others ran on (--restart-scope rank); each is also a restart of "
         "reason \"replacement\".")
      .add({}, static_cast<double>(s.counters.rankReplacements))
      .writeTo(out);
  Family("ddprun_hangs_detected_total", "counter", "Hang verdicts: one per hung attempt, whatever the number of ranks.")
      .add({}, static_cast<double>(s.counters.hangsDetected))
      .writeTo(out);
  if (s.hangTimeoutSeconds) {
    Family("ddprun_hang_timeout_seconds", "gauge", "The hang timeout in effect now.")
        .add({}, *s.hangTimeoutSeconds)
        .writeTo(out);
  }
  Family("ddprun_stragglers_flagged_total", "counter", "Straggler warnings issued.")
      .add({}, static_cast<double>(s.counters.stragglersFlagged))
      .writeTo(out);
  Family("ddprun_spins_reported_total", "counter",
         "Ranks reported as spinning while their peers waited in a collective (reported, not acted on).")
      .add({}, static_cast<double>(s.counters.spinsReported))
      .writeTo(out);
  if (s.ended) {
    Family("ddprun_job_exit_code", "gauge", "ddprun's exit code once the job ended on this node.")
        .add({}, s.ended->exitCode)
        .writeTo(out);
    Family("ddprun_job_end_time_seconds", "gauge", "When the job ended on this node, in seconds since the Unix epoch.")
        .add({}, static_cast<double>(s.ended->unixMs) / 1000)
        .writeTo(out);
  }
}

/// A per-rank family: one sample for each rank that `value` gives a number for.
void writeRankFamily(const AgentSnapshot& s, const char* name, const char* help,
                     const std::function<std::optional<double>(const RankSnapshot&)>& value, std::string& out) {
  Family family(name, "gauge", help);
  for (const RankSnapshot& rank : s.ranks) {
    if (auto v = value(rank)) family.add(rankLabels(rank), *v);
  }
  family.writeTo(out);
}

void writeRankFamilies(const AgentSnapshot& s, std::string& out) {
  Family state("ddprun_worker_state", "gauge", "1 for each local rank's current state, 0 for the others.");
  for (const RankSnapshot& rank : s.ranks) addStateSet(state, rankLabels(rank), kRankStates, rank.state);
  state.writeTo(out);
  using R = const RankSnapshot&;
  using V = std::optional<double>;
  writeRankFamily(
      s, "ddprun_worker_pid", "Process id of the rank's worker.", [](R r) -> V { return r.pid; }, out);
  writeRankFamily(
      s, "ddprun_worker_step", "Last step the rank reported.",
      [](R r) -> V { return r.step ? V(static_cast<double>(*r.step)) : std::nullopt; }, out);
  writeRankFamily(
      s, "ddprun_worker_steps_per_second", "Step rate over the agent's sliding window.",
      [](R r) -> V { return r.stepsPerSecond; }, out);
  writeRankFamily(
      s, "ddprun_worker_samples_per_second", "Samples per second from the rank's samples field.",
      [](R r) -> V { return r.samplesPerSecond; }, out);
  Family steps("ddprun_worker_steps_total", "counter", "Steps the rank advanced, over every attempt of the run.");
  Family phase("ddprun_worker_phase", "gauge", "1 for the phase the rank last reported.");
  Family scalar("ddprun_worker_scalar", "gauge", "Scalars the rank writes into its progress file (name=value lines).");
  for (const RankSnapshot& rank : s.ranks) {
    steps.add(rankLabels(rank), static_cast<double>(rank.stepsTotal));
    if (rank.step) {
      Labels labels = rankLabels(rank);
      labels.emplace_back("phase", rank.phase.empty() ? "train" : rank.phase);
      phase.add(labels, 1);
    }
    for (const auto& [name, value] : rank.scalars) {
      Labels labels = rankLabels(rank);
      labels.emplace_back("name", name);
      scalar.add(labels, value);
    }
  }
  steps.writeTo(out);
  phase.writeTo(out);
  scalar.writeTo(out);
  writeRankFamily(
      s, "ddprun_worker_progress_age_seconds", "Seconds since the rank's last progress report.",
      [](R r) -> V { return r.progressAgeSeconds; }, out);
  writeRankFamily(
      s, "ddprun_worker_output_age_seconds", "Seconds since the rank's last line of output.",
      [](R r) -> V { return r.outputAgeSeconds; }, out);
  writeRankFamily(
      s, "ddprun_worker_hung", "1 when hang detection flagged the rank in this attempt.",
      [](R r) -> V { return r.hung ? 1 : 0; }, out);
  writeRankFamily(
      s, "ddprun_worker_straggler", "1 while the rank is flagged as a straggler.",
      [](R r) -> V { return r.straggler ? 1 : 0; }, out);
  writeRankFamily(
      s, "ddprun_worker_output_held", "1 while ddprun does not read the rank's output (console full).",
      [](R r) -> V { return r.outputHeld ? 1 : 0; }, out);
}

void writeStoreFamilies(const StoreStats& store, std::string& out) {
  Family("ddprun_store_connections", "gauge", "Open connections to the agent's rendezvous store.")
      .add({}, static_cast<double>(store.connections))
      .writeTo(out);
  Family("ddprun_store_keys", "gauge", "Keys held by the agent's rendezvous store.")
      .add({}, static_cast<double>(store.keys))
      .writeTo(out);
  Family("ddprun_store_operations_total", "counter", "Requests served by the agent's rendezvous store.")
      .add({}, static_cast<double>(store.operations))
      .writeTo(out);
}

}  // namespace

std::string escapeLabelValue(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string formatMetrics(const AgentSnapshot& snapshot) {
  std::string out;
  writeAgentFamilies(snapshot, out);
  writeRankFamilies(snapshot, out);
  if (snapshot.store) writeStoreFamilies(*snapshot.store, out);
  return out;
}

}  // namespace ddprun::status
