#include "launcher/history/attempt_log.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "launcher/status/snapshot_json.hpp"

namespace ddprun::launcher {

std::vector<status::Culprit> culpritsOf(const std::vector<WorkerFailure>& failures) {
  std::vector<status::Culprit> culprits;
  if (failures.empty()) return culprits;
  const bool everyoneWaits =
      std::all_of(failures.begin(), failures.end(), [](const WorkerFailure& f) { return f.waitsOnPeers; });
  const size_t root = rootCauseIndex(failures);
  std::vector<size_t> order{root};
  for (size_t i = 0; i < failures.size(); ++i) {
    if (i != root) order.push_back(i);
  }
  for (size_t i : order) {
    const WorkerFailure& f = failures[i];
    if (f.waitsOnPeers && !everyoneWaits) continue;
    status::Culprit c;
    c.rank = f.globalRank;
    c.localRank = f.localRank;
    c.cause = toString(f.cause);
    if (f.exit.signal != 0) {
      c.signal = f.exit.signal;
    } else {
      c.exitCode = f.exit.exitCode;
    }
    c.message = f.message.substr(0, f.message.find('\n'));
    c.stacksFile = f.stacksFile;
    c.flightRecorderDump = f.flightRecorderDump;
    if (f.fromErrorFile) c.errorFile = f.errorFile;
    // The summary's bound for what it prints of a stderr tail; an error file's whole traceback stays in the file.
    c.traceback =
        keepLastLines(f.traceback, 40, 8 * 1024, f.fromErrorFile ? "; the whole traceback is in " + f.errorFile : "");
    c.stderrTailFile = f.stderrTailFile;
    culprits.push_back(std::move(c));
  }
  return culprits;
}

void AttemptLog::begin(int attempt, int ranks) {
  status::AttemptRecord record;
  record.attempt = attempt;
  record.startUnixMs = clock_.wallMs();
  record.ranks = ranks;
  records_.push_back(record);
}

void AttemptLog::end(const std::string& reason, std::optional<int64_t> bestStep,
                     const std::vector<WorkerFailure>& failures) {
  if (records_.empty() || records_.back().endUnixMs) return;
  status::AttemptRecord& record = records_.back();
  record.endUnixMs = clock_.wallMs();
  record.reason = reason;
  record.bestStep = bestStep;
  record.culprits = culpritsOf(failures);
  nlohmann::json culprits = nlohmann::json::array();
  for (const auto& c : record.culprits) culprits.push_back(status::culpritToJson(c));
  nlohmann::json line = {{"attempt", record.attempt}, {"start", record.startUnixMs}, {"end", *record.endUnixMs},
                         {"reason", reason},          {"ranks", record.ranks},       {"best_step", nullptr},
                         {"culprits", culprits}};
  if (bestStep) line["best_step"] = *bestStep;
  std::ofstream out(path_, std::ios::app);
  out << line.dump() << "\n";
  if (!out) spdlog::warn("cannot append to {}", path_);
}

void AttemptLog::replaced(const WorkerFailure& failure, int generation) {
  if (records_.empty()) return;
  status::Replacement replacement;
  replacement.unixMs = clock_.wallMs();
  replacement.rank = failure.globalRank;
  replacement.generation = generation;
  const auto named = culpritsOf({failure});
  if (!named.empty()) replacement.failed = named.front();
  records_.back().replacements.push_back(replacement);
  nlohmann::json culprits = nlohmann::json::array();
  for (const auto& c : named) culprits.push_back(status::culpritToJson(c));
  const nlohmann::json line = {{"attempt", records_.back().attempt}, {"event", "replacement"},
                               {"time", replacement.unixMs},         {"rank", failure.globalRank},
                               {"generation", generation},           {"culprits", culprits}};
  std::ofstream out(path_, std::ios::app);
  out << line.dump() << "\n";
  if (!out) spdlog::warn("cannot append to {}", path_);
}

void AttemptLog::replacementFormed(int generation) {
  if (records_.empty()) return;
  for (auto& replacement : records_.back().replacements) {
    if (replacement.generation == generation && !replacement.formedUnixMs) replacement.formedUnixMs = clock_.wallMs();
  }
}

}  // namespace ddprun::launcher
