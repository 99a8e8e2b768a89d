#include "launcher/attempt_log.hpp"

#include <spdlog/spdlog.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

namespace ddprun::launcher {
namespace {

int64_t nowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void AttemptLog::begin(int attempt, int ranks) {
  status::AttemptRecord record;
  record.attempt = attempt;
  record.startUnixMs = nowUnixMs();
  record.ranks = ranks;
  records_.push_back(record);
}

void AttemptLog::end(const std::string& reason, std::optional<int64_t> bestStep) {
  if (records_.empty() || records_.back().endUnixMs) return;
  status::AttemptRecord& record = records_.back();
  record.endUnixMs = nowUnixMs();
  record.reason = reason;
  record.bestStep = bestStep;
  nlohmann::json line = {{"attempt", record.attempt}, {"start", record.startUnixMs}, {"end", *record.endUnixMs},
                         {"reason", reason},          {"ranks", record.ranks},      {"best_step", nullptr}};
  if (bestStep) line["best_step"] = *bestStep;
  std::ofstream out(path_, std::ios::app);
  out << line.dump() << "\n";
  if (!out) spdlog::warn("cannot append to {}", path_);
}

}  // namespace ddprun::launcher
