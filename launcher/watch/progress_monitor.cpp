#include "launcher/watch/progress_monitor.hpp"

#include <algorithm>
#include <cstdlib>

namespace ddprun::launcher {

namespace {
/// Points of the sparkline kept per rank (one a second).
constexpr size_t kHistory = 120;
/// The live steps/s are over this many seconds.
constexpr double kRateSeconds = 5;
/// The phase a report without one stands for.
constexpr const char* kDefaultPhase = "train";

std::chrono::steady_clock::duration secondsToDuration(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}
}  // namespace

std::string phaseOf(const ProgressRecord& record) { return record.phase.empty() ? kDefaultPhase : record.phase; }

ProgressMonitor::ProgressMonitor(HangSettings hang, StragglerSettings straggler) : hang_(hang), straggler_(straggler) {}

void ProgressMonitor::startAttempt(size_t ranks, SteadyTime now) {
  reportedBefore_.resize(std::max(reportedBefore_.size(), ranks), false);
  for (size_t i = 0; i < ranks_.size() && i < reportedBefore_.size(); ++i) {
    if (ranks_[i].last) reportedBefore_[i] = true;
  }
  ranks_.assign(ranks, Rank{});
  for (auto& rank : ranks_) rank.changed = now;
  if (stepsTotal_.size() < ranks) stepsTotal_.resize(ranks, 0);
  attemptStart_ = now;
  windowStart_ = now;
  lastRateSample_ = now;
}

bool ProgressMonitor::observe(size_t index, const RankObservation& observation, SteadyTime now) {
  if (index >= ranks_.size()) return false;
  Rank& rank = ranks_[index];
  rank.running = observation.running;
  rank.lastOutput = observation.lastOutput;
  if (!observation.progress) return false;  // empty or half-written: wait for the next tick
  const ProgressRecord& report = *observation.progress;
  if (phaseOf(report) != kDefaultPhase) announcedPhase_ = true;
  if (!rank.last) {
    // The first report of the attempt: the start-up is learnt; the interval that follows (the first step, a
    // warm-up) is not.
    longestStartup_ = std::max(longestStartup_.value_or(0), seconds(now - attemptStart_));
    everReported_ = true;
    rank.last = report;
    rank.first = report.step;
    rank.changed = now;
    rank.samples.push_back({now, report.step, report.busySeconds, report.samples});
    return true;
  }
  const bool stepped = report.step > rank.last->step;
  const bool newPhase = report.step == rank.last->step && phaseOf(report) != phaseOf(*rank.last);
  if (!stepped && !newPhase) {
    // A smaller step is a torn read of a file being rewritten (or an older report): ignored. The same step
    // may bring new scalars.
    if (report.step == rank.last->step) rank.last->scalars = report.scalars;
    return false;
  }
  if (rank.learns) {
    // The time since the previous change belongs to the phase the rank was in.
    double& longest = longestInterval_[phaseOf(*rank.last)];
    longest = std::max(longest, seconds(now - rank.changed));
  }
  rank.learns = true;
  if (stepped) {
    stepsTotal_[index] += static_cast<uint64_t>(report.step - rank.last->step);
    rank.samples.push_back({now, report.step, report.busySeconds, report.samples});
    // Two windows of samples are enough for a pace over the last one (and for the live rate).
    const auto horizon = secondsToDuration(std::max(2 * straggler_.windowSeconds, 2 * kRateSeconds));
    while (rank.samples.size() > 2 && rank.samples.front().time < now - horizon) rank.samples.pop_front();
  }
  rank.changed = now;
  rank.last = report;
  return true;
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
  const auto timeout = autoTimeout(phase);
  return timeout ? std::optional<double>(timeout->seconds) : std::nullopt;
}

std::optional<ProgressMonitor::Timeout> ProgressMonitor::autoTimeout(const std::string& phase) const {
  const auto it = longestInterval_.find(phase);
  if (it == longestInterval_.end()) {
    // The default phase is judged from the first report, at the floor; an announced phase never seen to
    // finish is not judged (nothing says how long it may take).
    if (phase != kDefaultPhase) return std::nullopt;
    return Timeout{hang_.minTimeoutSeconds, TimeoutSource::kFloor, 0};
  }
  const double learnt = hang_.safetyFactor * it->second;
  if (learnt <= hang_.minTimeoutSeconds) return Timeout{hang_.minTimeoutSeconds, TimeoutSource::kFloor, it->second};
  return Timeout{learnt, TimeoutSource::kLearnt, it->second};
}

std::string ProgressMonitor::jobPhase() const {
  // An announced phase of any running rank rules; of several, the one judged most leniently (or not at all).
  std::string phase = kDefaultPhase;
  std::optional<double> longest;
  for (const auto& rank : ranks_) {
    if (!rank.running || !rank.last || phaseOf(*rank.last) == kDefaultPhase) continue;
    const auto timeout = autoTimeout(phaseOf(*rank.last));
    if (!timeout) return phaseOf(*rank.last);
    if (!longest || timeout->seconds > *longest) {
      longest = timeout->seconds;
      phase = phaseOf(*rank.last);
    }
  }
  return phase;
}

std::optional<ProgressMonitor::Timeout> ProgressMonitor::timeoutFor(size_t index, const std::string& phase) const {
  if (hang_.mode == HangSettings::Mode::kOff) return std::nullopt;
  const Rank& rank = ranks_[index];
  if (!rank.last) {
    // No report in this attempt yet: judged from the attempt's start only when this rank reported in an earlier
    // one (a rank that never reports, e.g. all but rank 0 of a script that reports on rank 0, is never judged).
    const bool reportedBefore = index < reportedBefore_.size() && reportedBefore_[index];
    if (!reportedBefore || !longestStartup_) return std::nullopt;
    if (hang_.mode == HangSettings::Mode::kFixed) return Timeout{hang_.fixedSeconds, TimeoutSource::kFlag, 0};
    const double learnt = hang_.safetyFactor * *longestStartup_;
    return Timeout{std::max(hang_.minTimeoutSeconds, learnt), TimeoutSource::kStartup, *longestStartup_};
  }
  if (hang_.mode == HangSettings::Mode::kFixed) return Timeout{hang_.fixedSeconds, TimeoutSource::kFlag, 0};
  return autoTimeout(phase);
}

std::optional<Suspicion> ProgressMonitor::suspicion(SteadyTime now) const {
  Suspicion found;
  found.phase = jobPhase();
  found.stepsOnly = !announcedPhase_;
  found.safetyFactor = hang_.safetyFactor;
  found.lastStep = bestStep();
  SteadyTime latest = attemptStart_;
  bool any = false;
  for (const auto& rank : ranks_) {
    if (!rank.running) continue;
    any = true;
    latest = std::max(latest, rank.changed);
  }
  if (!any) return std::nullopt;
  found.stalledSeconds = seconds(now - latest);
  for (size_t i = 0; i < ranks_.size(); ++i) {
    const Rank& rank = ranks_[i];
    if (!rank.running) continue;
    if (auto timeout = timeoutFor(i, found.phase); timeout && seconds(now - rank.changed) > timeout->seconds) {
      found.ranks.push_back(i);
      if (timeout->seconds >= found.timeoutSeconds) {
        found.timeoutSeconds = timeout->seconds;
        found.source = timeout->source;
        found.learntSeconds = timeout->learnt;
      }
      continue;
    }
    if (hang_.outputTimeoutSeconds) {
      const double silent = seconds(now - std::max(rank.lastOutput, attemptStart_));
      if (silent > *hang_.outputTimeoutSeconds) {
        found.ranks.push_back(i);
        if (*hang_.outputTimeoutSeconds >= found.timeoutSeconds) {
          found.timeoutSeconds = *hang_.outputTimeoutSeconds;
          found.source = TimeoutSource::kOutput;
          found.learntSeconds = 0;
        }
      }
    }
  }
  if (found.ranks.empty()) return std::nullopt;
  return found;
}

void ProgressMonitor::markHung(const std::vector<size_t>& ranks) {
  for (size_t i : ranks) {
    if (i < ranks_.size()) ranks_[i].hung = true;
  }
}

void ProgressMonitor::regroup(SteadyTime now) {
  for (auto& rank : ranks_) {
    rank.changed = now;
    rank.learns = false;
    rank.hung = false;
  }
}

std::optional<double> ProgressMonitor::currentTimeoutSeconds(SteadyTime /*now*/) const {
  const std::string phase = jobPhase();
  std::optional<double> timeout;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    if (!ranks_[i].running) continue;
    if (auto t = timeoutFor(i, phase); t && (!timeout || t->seconds > *timeout)) timeout = t->seconds;
  }
  return timeout;
}

double ProgressMonitor::silentSeconds(size_t index, SteadyTime now) const {
  return index < ranks_.size() ? seconds(now - ranks_[index].changed) : 0;
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

int64_t ProgressMonitor::stepsOver(const Rank& rank, SteadyTime from, SteadyTime to) {
  // The step at each end: the last sample at or before it (the first one there is, for the start).
  const Sample* atFrom = nullptr;
  const Sample* atTo = nullptr;
  for (const auto& sample : rank.samples) {
    if (atFrom == nullptr || sample.time <= from) atFrom = &sample;
    if (sample.time <= to) atTo = &sample;
  }
  return atFrom != nullptr && atTo != nullptr ? atTo->step - atFrom->step : 0;
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
    // Ranks in lockstep (their steps over the window within one of each other) are no stragglers by their pace per
    // wall second, whatever pause fell at the window's edge: in synchronous DDP only busy time tells them apart.
    bool lockstep = !byBusy[i];
    for (size_t j = 0; lockstep && j < ranks_.size(); ++j) {
      if (j != i && paces[j])
        lockstep = std::llabs(stepsOver(ranks_[i], from, now) - stepsOver(ranks_[j], from, now)) <= 1;
    }
    if (!lockstep && *paces[i] * straggler_.factor < median) {
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
    out.scalars = rank.last->scalars;
  }
  if (rank.lastOutput != SteadyTime{}) out.outputAgeSeconds = seconds(now - rank.lastOutput);
  out.rateHistory = rank.rateHistory;
  // A rank that has exited is measured up to its last report, so its rates stay what they were (a finished report's
  // steps/s no longer decays beside a samples/s that does not); a running one up to now, so a stall shows.
  const SteadyTime end = rank.running || rank.samples.empty() ? now : rank.samples.back().time;
  out.stepsPerSecond = rateOver(rank, end - secondsToDuration(kRateSeconds), end);
  // Samples per second over the same window and up to the same end, from the first sample that reports them.
  const Sample* first = nullptr;
  for (const auto& sample : rank.samples) {
    if (sample.time >= end - secondsToDuration(kRateSeconds) && sample.samples) {
      first = &sample;
      break;
    }
  }
  if (first != nullptr && rank.last && rank.last->samples && end > first->time &&
      *rank.last->samples >= *first->samples) {
    out.samplesPerSecond = static_cast<double>(*rank.last->samples - *first->samples) / seconds(end - first->time);
  }
  out.stepsTotal = index < stepsTotal_.size() ? stepsTotal_[index] : 0;
  out.hung = rank.hung;
  out.straggler = rank.straggler;
  return out;
}

bool ProgressMonitor::attemptReported() const {
  return std::any_of(ranks_.begin(), ranks_.end(), [](const Rank& rank) { return rank.last.has_value(); });
}

double ProgressMonitor::longestInterval(const std::string& phase) const {
  const auto it = longestInterval_.find(phase);
  return it == longestInterval_.end() ? 0 : it->second;
}

std::optional<int64_t> ProgressMonitor::bestStep() const {
  std::optional<int64_t> best;
  for (const auto& rank : ranks_) {
    if (rank.last && (!best || rank.last->step > *best)) best = rank.last->step;
  }
  return best;
}

std::optional<int64_t> ProgressMonitor::startStep() const {
  std::optional<int64_t> start;
  for (const auto& rank : ranks_) {
    if (rank.first && (!start || *rank.first < *start)) start = rank.first;
  }
  return start;
}

std::optional<int64_t> ProgressMonitor::step(size_t index) const {
  if (index >= ranks_.size() || !ranks_[index].last) return std::nullopt;
  return ranks_[index].last->step;
}

}  // namespace ddprun::launcher
