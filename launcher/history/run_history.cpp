#include "launcher/history/run_history.hpp"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <fstream>
#include <stdexcept>

#include "launcher/status/snapshot_json.hpp"
#include "launcher/status/status_page.hpp"

namespace ddprun::launcher {

namespace {

/// Writes `contents` through a temporary file and a rename, so a reader never sees half of it. No fsync: the
/// report is a convenience, and ddprun's exit must not wait for the disk.
void writeReplacing(const std::string& path, const std::string& contents) {
  const std::string temp = path + ".tmp";
  std::ofstream out(temp, std::ios::binary | std::ios::trunc);
  out << contents;
  out.close();
  if (!out || std::rename(temp.c_str(), path.c_str()) != 0) {
    std::remove(temp.c_str());
    throw std::runtime_error("cannot write " + path);
  }
}

}  // namespace

RunHistory::RunHistory(std::string runDir, const Clock& clock, bool logEvents)
    : runDir_(std::move(runDir)),
      clock_(clock),
      logEvents_(logEvents),
      attempts_(runDir_ + "/attempts.jsonl", clock),
      startUnixMs_(clock.wallMs()) {}

const std::vector<std::string>& RunHistory::reportFiles() {
  static const std::vector<std::string> files{"attempts.jsonl", "status.json", "report.html", "console-unshown.log"};
  return files;
}

void RunHistory::beginAttempt(int attempt, int ranks) {
  const auto& records = attempts_.records();
  // Every start after the first is a restart, of the kind that ended the attempt before it.
  if (!records.empty()) ++restartsByReason_[records.back().reason.empty() ? "unknown" : records.back().reason];
  attempts_.begin(attempt, ranks);
  event("ddprun.attempt.start", {{"attempt", attempt}, {"ranks", ranks}});
}

void RunHistory::event(const char* name, nlohmann::json metadata) const {
  if (!logEvents_) return;
  const nlohmann::json line = {
      {"name", name}, {"source", "AGENT"}, {"timestamp", clock_.wallMs()}, {"metadata", std::move(metadata)}};
  spdlog::info("event: {}", line.dump());
}

void RunHistory::endAttempt(AttemptEndReason reason, std::optional<int64_t> bestStep,
                            const std::vector<WorkerFailure>& failures, const std::string& summary) {
  lastEnd_ = reason;
  attempts_.end(toString(reason), bestStep, failures);
  nlohmann::json culprits = nlohmann::json::array();
  for (const auto& culprit : attempts_.records().back().culprits) culprits.push_back(status::culpritToJson(culprit));
  event("ddprun.attempt.end", {{"attempt", attempts_.records().back().attempt},
                               {"reason", toString(reason)},
                               {"best_step", bestStep ? nlohmann::json(*bestStep) : nlohmann::json(nullptr)},
                               {"culprits", culprits}});
  if (!summary.empty()) {
    lastFailure_ = summary;
    lastFailureUnixMs_ = clock_.wallMs();
  }
}

void RunHistory::rankReplaced(const WorkerFailure& failure, int generation) {
  attempts_.replaced(failure, generation);
  ++restartsByReason_["replacement"];
  ++rankReplacements_;
  event("ddprun.rank.replaced", {{"rank", failure.globalRank}, {"generation", generation}});
}

void RunHistory::replacementFormed(int generation) {
  attempts_.replacementFormed(generation);
  event("ddprun.rank.replacement_formed", {{"generation", generation}});
}

void RunHistory::jobEnded(int exitCode, const std::string& how) {
  if (ended_) return;
  ended_ = status::JobEnd{clock_.wallMs(), exitCode, how};
  event("ddprun.job.end", {{"exit_code", exitCode}, {"how", how}});
}

void RunHistory::signSeen(FirstSign sign) {
  sign_ = sign;
  signSeen_ = clock_.now();
}

double RunHistory::msSinceSign() const {
  return std::chrono::duration<double, std::milli>(clock_.now() - signSeen_).count();
}

std::string RunHistory::describeStart(int attempt, const std::string& workers, const std::string& what,
                                      double startMs) const {
  if (!lastEnd_ && attempt == 0) return fmt::format("started {} ({}) in {:.1f} ms", workers, what, startMs);
  if (!lastEnd_) {
    // This ddprun's first attempt in a job already past round 0 (a late node, or a store host that came back): no
    // end of its own to time the start from.
    return fmt::format("attempt {}: started {} ({}) in {:.1f} ms; this node joined the job at round {}", attempt,
                       workers, what, startMs, attempt);
  }
  // Timed from the first sign: a failure later counted as a membership change says both.
  const std::string ended = toString(*lastEnd_);
  const std::string seen =
      ended == toString(sign_) ? ended : std::string(toString(sign_)) + " (counted as a " + ended + ")";
  return fmt::format("attempt {}: restarted {}, {:.1f} ms after the {} was seen", attempt, workers, msSinceSign(),
                     seen);
}

int RunHistory::currentAttempt() const { return attempts_.records().empty() ? 0 : attempts_.records().back().attempt; }

void RunHistory::fill(status::AgentSnapshot& s) const {
  s.startUnixMs = startUnixMs_;
  s.attempt = currentAttempt();
  s.attempts = attempts_.records();
  s.lastFailure = lastFailure_;
  s.lastFailureUnixMs = lastFailureUnixMs_;
  s.ended = ended_;
  s.counters.restarts = s.attempts.empty() ? 0 : s.attempts.size() - 1;
  s.counters.restartsByReason = restartsByReason_;
  s.counters.rankReplacements = rankReplacements_;
}

std::string RunHistory::writeReport(const status::AgentSnapshot& final) const {
  const std::string json = status::snapshotToJson(final).dump(2) + "\n";
  const std::string report = runDir_ + "/report.html";
  try {
    writeReplacing(runDir_ + "/status.json", json);
    writeReplacing(report, status::reportPageHtml(json));
  } catch (const std::exception& e) {
    spdlog::warn("cannot write the run's report: {}", e.what());
    return "";
  }
  return report;
}

}  // namespace ddprun::launcher
