#include "launcher/watch/activity_monitor.hpp"

#include <algorithm>

namespace ddprun::launcher {
namespace {

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

void ActivityMonitor::startAttempt(size_t ranks, Time now) {
  ranks_.assign(ranks, Rank{});
  for (auto& rank : ranks_) rank.worked = rank.moved = rank.mainWorked = rank.ioMoved = now;
}

namespace {

/// The growth of a counter that may shrink (a socket closed, a process gone): none then.
double grown(double now, double before) { return std::max(0.0, now - before); }
double grown(uint64_t now, uint64_t before) { return now > before ? static_cast<double>(now - before) : 0; }

}  // namespace

void ActivityMonitor::observe(size_t index, const ActivityCounters& counters, Time now) {
  if (index >= ranks_.size()) return;
  Rank& rank = ranks_[index];
  if (rank.last && !rank.newBaseline && now > rank.lastAt) {
    const ActivityCounters& before = *rank.last;
    const double elapsed = seconds(now - rank.lastAt);
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
    const bool worked = busyCpu || movedBytes || counters.runnable > 0 || counters.mainThreadState == 'D';
    if (worked) rank.worked = std::max(rank.worked, now);
    if (busyCpu) rank.workedShare = rank.cpuShare;
    if (movedBytes) rank.ioMoved = std::max(rank.ioMoved, now);
    if (movedBytes || otherThreadsCpu >= kBusyCpuShare * elapsed) rank.moved = std::max(rank.moved, now);
    if (mainCpu >= kBusyCpuShare * elapsed) rank.mainWorked = std::max(rank.mainWorked, now);
  }
  rank.last = counters;
  rank.lastAt = now;
  rank.newBaseline = false;
}

void ActivityMonitor::progressed(size_t index, Time now) {
  if (index >= ranks_.size()) return;
  Rank& rank = ranks_[index];
  for (Time* t : {&rank.worked, &rank.moved, &rank.mainWorked, &rank.ioMoved}) *t = std::max(*t, now);
}

void ActivityMonitor::forget(size_t index) {
  if (index >= ranks_.size()) return;
  ranks_[index].last.reset();
  ranks_[index].lastAt = Time{};
  ranks_[index].workedShare.reset();
}

void ActivityMonitor::shiftForPause(Time pausedAt, Time now) {
  for (auto& rank : ranks_) {
    for (Time* t : {&rank.worked, &rank.moved, &rank.mainWorked, &rank.ioMoved}) *t += now - pausedAt;
    // The next interval must not span the pause; the last sample still says whether the main thread was stopped
    // (SIGSTOP, a debugger) or read console input, which a look in between does not change.
    rank.newBaseline = true;
    rank.lastAt = Time{};
  }
}

double ActivityMonitor::idleSeconds(size_t index, Time now) const {
  return index < ranks_.size() ? std::max(0.0, seconds(now - ranks_[index].worked)) : 0;
}

double ActivityMonitor::quietSeconds(size_t index, Time now) const {
  return index < ranks_.size() ? std::max(0.0, seconds(now - ranks_[index].moved)) : 0;
}

double ActivityMonitor::mainIdleSeconds(size_t index, Time now) const {
  return index < ranks_.size() ? std::max(0.0, seconds(now - ranks_[index].mainWorked)) : 0;
}

double ActivityMonitor::ioIdleSeconds(size_t index, Time now) const {
  return index < ranks_.size() ? std::max(0.0, seconds(now - ranks_[index].ioMoved)) : 0;
}

std::optional<double> ActivityMonitor::cpuShare(size_t index) const {
  return index < ranks_.size() ? ranks_[index].cpuShare : std::nullopt;
}

std::optional<double> ActivityMonitor::workedShare(size_t index) const {
  return index < ranks_.size() ? ranks_[index].workedShare : std::nullopt;
}

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
