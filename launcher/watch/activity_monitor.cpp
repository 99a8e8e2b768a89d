#include "launcher/watch/activity_monitor.hpp"

#include <algorithm>

namespace ddprun::launcher {
namespace {

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

void ActivityMonitor::startAttempt(size_t ranks, Time now) {
  ranks_.assign(ranks, Rank{});
  for (auto& rank : ranks_) rank.worked = now;
}

void ActivityMonitor::observe(size_t index, const ActivityCounters& counters, Time now) {
  if (index >= ranks_.size()) return;
  Rank& rank = ranks_[index];
  if (rank.last && now > rank.lastAt) {
    const double elapsed = seconds(now - rank.lastAt);
    const double cpu = std::max(0.0, counters.cpuSeconds - rank.last->cpuSeconds);
    const double io =
        counters.ioBytes > rank.last->ioBytes ? static_cast<double>(counters.ioBytes - rank.last->ioBytes) : 0;
    rank.cpuShare = cpu / elapsed;
    const bool worked = cpu >= kBusyCpuShare * elapsed || io >= kBusyIoBytesPerSecond * elapsed ||
                        counters.storageBytes > rank.last->storageBytes || counters.runnable > 0 ||
                        counters.mainThreadState == 'D';
    if (worked) rank.worked = std::max(rank.worked, now);
  }
  rank.last = counters;
  rank.lastAt = now;
}

void ActivityMonitor::progressed(size_t index, Time now) {
  if (index < ranks_.size()) ranks_[index].worked = std::max(ranks_[index].worked, now);
}

void ActivityMonitor::forget(size_t index) {
  if (index >= ranks_.size()) return;
  ranks_[index].last.reset();
  ranks_[index].lastAt = Time{};
}

void ActivityMonitor::shiftForPause(Time pausedAt, Time now) {
  for (auto& rank : ranks_) {
    rank.worked += now - pausedAt;
    rank.last.reset();  // the next interval must not span the pause
    rank.lastAt = Time{};
  }
}

double ActivityMonitor::idleSeconds(size_t index, Time now) const {
  return index < ranks_.size() ? std::max(0.0, seconds(now - ranks_[index].worked)) : 0;
}

std::optional<double> ActivityMonitor::cpuShare(size_t index) const {
  return index < ranks_.size() ? ranks_[index].cpuShare : std::nullopt;
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
