#include "launcher/progress_monitor.hpp"

#include <algorithm>

namespace ddprun::launcher {

namespace {
/// Points of the sparkline kept per rank (one a second).
constexpr size_t kHistory = 120;
/// The live steps/s are over this many seconds.
constexpr double kRateSeconds = 5;

std::chrono::steady_clock::duration secondsToDuration(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}
}  // namespace

ProgressMonitor::ProgressMonitor(HangSettings hang, StragglerSettings straggler)
    : hang_(hang), straggler_(straggler) {}

void ProgressMonitor::startAttempt(size_t ranks, SteadyTime now) {
  ranks_.assign(ranks, Rank{});
  for (auto& rank : ranks_) rank.changed = now;
  attemptStart_ = now;
  windowStart_ = now;
  lastRateSample_ = now;
}

void ProgressMonitor::observe(size_t index, const RankObservation& observation, SteadyTime now) {
  if (index >= ranks_.size()) return;
  Rank& rank = ranks_[index];
  rank.running = observation.running;
  rank.lastOutput = observation.lastOutput;
  if (!observation.progress) return;  // empty or half-written: wait for the next tick
  const ProgressRecord& report = *observation.progress;
  everReported_ = true;
  if (!rank.last || report.step > rank.last->step) {
    if (rank.last) {
      // The time since the previous change belongs to the phase the rank announced with it.
      double& longest = longestInterval_[rank.last->phase];
      longest = std::max(longest, seconds(now - rank.changed));
    }
    rank.changed = now;
    ++rank.reports;
    rank.samples.push_back({now, report.step, report.busySeconds});
    // Two windows of samples are enough for a pace over the last one (and for the live rate).
    const auto horizon = secondsToDuration(std::max(2 * straggler_.windowSeconds, 2 * kRateSeconds));
    while (rank.samples.size() > 2 && rank.samples.front().time < now - horizon) rank.samples.pop_front();
    rank.last = report;
  } else if (report.step == rank.last->step) {
    rank.last->phase = report.phase;  // a new phase at the same step (a checkpoint after the last step)
  }
  // A smaller step is a torn read of a file being rewritten (or an older report): ignored.
}

void ProgressMonitor::shiftForPause(SteadyTime pausedAt, SteadyTime now) {
  const auto paused = now - pausedAt;
  for (auto& rank : ranks_) {
    rank.changed += paused;
    if (rank.lastOutput != SteadyTime{}) rank.lastOutput += paused;
    for (auto& sample : rank.samples) sample.time += paused;
  }
  attemptStart_ += paused;
  windowStart_ += paused;
  lastRateSample_ += paused;
}

std::optional<double> ProgressMonitor::autoTimeoutSeconds(const std::string& phase) const {
  const auto it = longestInterval_.find(phase);
  if (it == longestInterval_.end()) return std::nullopt;
  return std::max(hang_.minTimeoutSeconds, hang_.safetyFactor * it->second);
}

std::optional<double> ProgressMonitor::timeoutFor(const Rank& rank) const {
  switch (hang_.mode) {
    case HangSettings::Mode::kOff: return std::nullopt;
    case HangSettings::Mode::kFixed: return rank.reports >= 1 ? std::optional<double>(hang_.fixedSeconds) : std::nullopt;
    case HangSettings::Mode::kAuto: return rank.reports >= 2 ? autoTimeoutSeconds(rank.last->phase) : std::nullopt;
  }
  return std::nullopt;
}

std::vector<Stall> ProgressMonitor::stalls(SteadyTime now) {
  std::vector<Stall> found;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    Rank& rank = ranks_[i];
    if (!rank.running || rank.flagged) continue;
    if (auto timeout = timeoutFor(rank)) {
      const double silent = seconds(now - rank.changed);
      if (silent > *timeout) {
        rank.flagged = true;
        found.push_back({i, rank.last->step, rank.last->phase, silent, *timeout, false});
        continue;
      }
    }
    if (hang_.outputTimeoutSeconds) {
      const SteadyTime since = std::max(rank.lastOutput, attemptStart_);
      const double silent = seconds(now - since);
      if (silent > *hang_.outputTimeoutSeconds) {
        rank.flagged = true;
        std::optional<int64_t> step;
        if (rank.last) step = rank.last->step;
        found.push_back({i, step, rank.last ? rank.last->phase : "", silent, *hang_.outputTimeoutSeconds, true});
      }
    }
  }
  return found;
}

std::optional<double> ProgressMonitor::paceOver(const Rank& rank, SteadyTime from, SteadyTime to, bool& byBusy) const {
  // The first and last samples inside [from, to]: steps per busy second when the rank reports its busy
  // time (in synchronous DDP every rank advances at the slowest one's rate; only its own busy time shows
  // who holds the others up), else steps per second.
  const Sample* first = nullptr;
  const Sample* last = nullptr;
  for (const auto& sample : rank.samples) {
    if (sample.time < from || sample.time > to) continue;
    if (first == nullptr) first = &sample;
    last = &sample;
  }
  if (first == nullptr || last == first) return std::nullopt;
  const double steps = static_cast<double>(last->step - first->step);
  byBusy = first->busy && last->busy && *last->busy > *first->busy;
  if (byBusy) return steps / (*last->busy - *first->busy);
  const double elapsed = seconds(last->time - first->time);
  return elapsed > 0 ? std::optional<double>(steps / elapsed) : std::nullopt;
}

std::vector<Straggler> ProgressMonitor::stragglers(SteadyTime now) {
  const auto window = secondsToDuration(straggler_.windowSeconds);
  if (now - windowStart_ < window) return {};
  const SteadyTime from = windowStart_;
  windowStart_ = now;
  std::vector<std::optional<double>> paces;
  std::vector<bool> byBusy(ranks_.size(), false);
  for (size_t i = 0; i < ranks_.size(); ++i) {
    bool busy = false;
    paces.push_back(ranks_[i].running ? paceOver(ranks_[i], from, now, busy) : std::nullopt);
    byBusy[i] = busy;
  }
  std::vector<Straggler> found;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    ranks_[i].straggler = false;
    if (!paces[i]) continue;
    // Compared with the median of the others (with two ranks: the other one).
    std::vector<double> others;
    for (size_t j = 0; j < ranks_.size(); ++j) {
      if (j != i && paces[j]) others.push_back(*paces[j]);
    }
    if (others.empty()) continue;
    std::sort(others.begin(), others.end());
    const size_t n = others.size();
    const double median = n % 2 == 1 ? others[n / 2] : (others[n / 2 - 1] + others[n / 2]) / 2;
    if (*paces[i] * straggler_.factor < median) {
      ranks_[i].straggler = true;
      found.push_back({i, *paces[i], median, byBusy[i]});
    }
  }
  return found;
}

double ProgressMonitor::rateOver(const Rank& rank, SteadyTime from, SteadyTime now) {
  if (rank.samples.empty() || !rank.last) return 0;
  // The step at `from`: the last sample at or before it (or the first one we have).
  const Sample* before = &rank.samples.front();
  for (const auto& sample : rank.samples) {
    if (sample.time > from) break;
    before = &sample;
  }
  const double elapsed = seconds(now - std::max(from, before->time));
  return elapsed > 0 ? static_cast<double>(rank.last->step - before->step) / elapsed : 0;
}

void ProgressMonitor::sampleRates(SteadyTime now) {
  if (now - lastRateSample_ < std::chrono::seconds(1)) return;
  lastRateSample_ = now;
  for (auto& rank : ranks_) {
    rank.rateHistory.push_back(rateOver(rank, now - secondsToDuration(kRateSeconds), now));
    if (rank.rateHistory.size() > kHistory) rank.rateHistory.erase(rank.rateHistory.begin());
  }
}

RankProgress ProgressMonitor::progress(size_t index, SteadyTime now) const {
  RankProgress out;
  if (index >= ranks_.size()) return out;
  const Rank& rank = ranks_[index];
  if (rank.last) {
    out.step = rank.last->step;
    out.phase = rank.last->phase;
    out.progressAgeSeconds = seconds(now - rank.changed);
  }
  if (rank.lastOutput != SteadyTime{}) out.outputAgeSeconds = seconds(now - rank.lastOutput);
  out.rateHistory = rank.rateHistory;
  out.stepsPerSecond = rateOver(rank, now - secondsToDuration(kRateSeconds), now);
  out.hung = rank.flagged;
  out.straggler = rank.straggler;
  return out;
}

std::optional<int64_t> ProgressMonitor::bestStep() const {
  std::optional<int64_t> best;
  for (const auto& rank : ranks_) {
    if (rank.last && (!best || rank.last->step > *best)) best = rank.last->step;
  }
  return best;
}

}  // namespace ddprun::launcher
