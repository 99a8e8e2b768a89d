#include "launcher/watch/evidence/activity_monitor.hpp"

#include <algorithm>

namespace ddprun::launcher {
namespace {

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

/// The growth of a counter that may shrink (a socket closed, a process gone): none then.
double grown(double now, double before) { return std::max(0.0, now - before); }
double grown(uint64_t now, uint64_t before) { return now > before ? static_cast<double>(now - before) : 0; }

}  // namespace

void ActivityMonitor::startAttempt(size_t ranks, Time now) {
  ranks_.assign(ranks, Rank{});
  for (auto& rank : ranks_) rank.worked = rank.moved = rank.mainWorked = rank.ioMoved = rank.progressedAt = now;
}

void ActivityMonitor::observe(size_t index, const ActivityCounters& counters, Time at) {
  if (index >= ranks_.size()) return;
  Rank& rank = ranks_[index];
  if (rank.last && at <= rank.lastAt) return;  // a sample the monitor has already seen (a replay repeats them)
  if (rank.last && !rank.newBaseline) {
    const ActivityCounters& before = *rank.last;
    const double elapsed = seconds(at - rank.lastAt);
    const double cpu = grown(counters.cpuSeconds, before.cpuSeconds);
    const double mainCpu = grown(counters.mainThreadCpuSeconds, before.mainThreadCpuSeconds);
    const double otherThreadsCpu = grown(counters.rankCpuSeconds - counters.mainThreadCpuSeconds,
                                         before.rankCpuSeconds - before.mainThreadCpuSeconds);
    // Socket bytes count only between two samples that both read them (a first reading is a baseline, not traffic).
    const double socketBytes =
        counters.socketsRead && before.socketsRead ? grown(counters.socketBytes, before.socketBytes) : 0;
    const double bytes = grown(counters.ioBytes, before.ioBytes) + socketBytes;
    const bool movedBytes = bytes >= kBusyIoBytesPerSecond * elapsed || counters.storageBytes > before.storageBytes;
    rank.cpuShare = cpu / elapsed;
    const bool busyCpu = cpu >= kBusyCpuShare * elapsed;
    rank.starved = grown(counters.computeDelaySeconds, before.computeDelaySeconds) >= kBusyCpuShare * elapsed;
    const bool worked =
        busyCpu || movedBytes || rank.starved || counters.runnable > 0 || counters.mainThreadState == 'D';
    if (worked) rank.worked = std::max(rank.worked, at);
    if (busyCpu) rank.workedShare = rank.cpuShare;
    if (movedBytes) rank.ioMoved = std::max(rank.ioMoved, at);
    if (movedBytes || otherThreadsCpu >= kBusyCpuShare * elapsed) rank.moved = std::max(rank.moved, at);
    const bool mainComputed = mainCpu >= kBusyCpuShare * elapsed;
    if (mainComputed) rank.mainWorked = std::max(rank.mainWorked, at);
    if (!mainComputed && counters.mainThreadRuns > before.mainThreadRuns) {
      rank.wakes.push_back(at);
      if (rank.wakes.size() > kPollWakes) rank.wakes.pop_front();
    }
  }
  if (!rank.last) rank.baseline = at - rank.progressedAt <= kTrustedGap ? rank.progressedAt : at;
  rank.last = counters;
  rank.lastAt = at;
  rank.newBaseline = false;
}

void ActivityMonitor::progressed(size_t index, Time now) {
  if (index >= ranks_.size()) return;
  Rank& rank = ranks_[index];
  for (Time* t : {&rank.worked, &rank.moved, &rank.mainWorked, &rank.ioMoved}) *t = std::max(*t, now);
  forget(index);
  rank.progressedAt = now;
}

void ActivityMonitor::forget(size_t index) {
  if (index >= ranks_.size()) return;
  Rank& rank = ranks_[index];
  rank.last.reset();
  rank.lastAt = rank.baseline = Time{};
  rank.wakes.clear();
  rank.workedShare.reset();
  rank.starved = false;
}

void ActivityMonitor::shiftForPause(Time pausedAt, Time now) {
  for (auto& rank : ranks_) {
    for (Time* t : {&rank.worked, &rank.moved, &rank.mainWorked, &rank.ioMoved, &rank.progressedAt}) {
      *t += now - pausedAt;
    }
    for (Time& wake : rank.wakes) wake += now - pausedAt;
    // The next interval must not span the pause; the last sample still says whether the main thread was stopped
    // (SIGSTOP, a debugger) or read console input, which a look in between does not change.
    if (rank.last) {
      rank.newBaseline = true;
      rank.baseline += now - pausedAt;
      rank.lastAt += now - pausedAt;
    }
  }
}

double ActivityMonitor::seen(const Rank& rank, Time since) const {
  if (!rank.last) return 0;
  return std::max(0.0, seconds(rank.lastAt - std::max(since, rank.baseline)));
}

double ActivityMonitor::idleSeconds(size_t index) const {
  return index < ranks_.size() ? seen(ranks_[index], ranks_[index].worked) : 0;
}

double ActivityMonitor::quietSeconds(size_t index) const {
  return index < ranks_.size() ? seen(ranks_[index], ranks_[index].moved) : 0;
}

double ActivityMonitor::mainIdleSeconds(size_t index) const {
  return index < ranks_.size() ? seen(ranks_[index], ranks_[index].mainWorked) : 0;
}

double ActivityMonitor::ioIdleSeconds(size_t index) const {
  return index < ranks_.size() ? seen(ranks_[index], ranks_[index].ioMoved) : 0;
}

bool ActivityMonitor::polls(size_t index, double withinSeconds) const {
  if (index >= ranks_.size()) return false;
  const Rank& rank = ranks_[index];
  return rank.wakes.size() >= kPollWakes && seconds(rank.lastAt - rank.wakes.back()) <= withinSeconds;
}

std::optional<double> ActivityMonitor::cpuShare(size_t index) const {
  return index < ranks_.size() ? ranks_[index].cpuShare : std::nullopt;
}

std::optional<double> ActivityMonitor::workedShare(size_t index) const {
  return index < ranks_.size() ? ranks_[index].workedShare : std::nullopt;
}

bool ActivityMonitor::starved(size_t index) const { return index < ranks_.size() && ranks_[index].starved; }

bool ActivityMonitor::waitsForInput(size_t index) const {
  return index < ranks_.size() && ranks_[index].last && ranks_[index].last->waitsForInput;
}

bool ActivityMonitor::stopped(size_t index) const {
  if (index >= ranks_.size() || !ranks_[index].last) return false;
  const char state = ranks_[index].last->mainThreadState;
  return state == 'T' || state == 't';
}

ActivityMonitor::Time ActivityMonitor::lastSample(size_t index) const {
  return index < ranks_.size() ? ranks_[index].lastAt : Time{};
}

}  // namespace ddprun::launcher
