#include "store/wake_queue.hpp"

#include <algorithm>

namespace ddprun::store {

void WakeQueue::add(KvState::Woken woken) {
  if (!owing()) {
    // A new crowd: places still held from the last one say nothing about it.
    order_.clear();
    told_.clear();
    inFlight_ = kInFlight;
  }
  std::sort(woken.begin(), woken.end());
  for (ConnectionId connection : woken) {
    ++owed_[connection];
    ++owedBytes_;
    order_.push_back(connection);
  }
}

std::vector<ConnectionId> WakeQueue::take(Clock::time_point now) {
  std::vector<ConnectionId> due;
  const bool paced = crowd() > atOnce_;
  if (paced) {
    const Clock::duration wait = patience();
    bool released = false;
    for (auto it = told_.begin(); it != told_.end();) {
      if (now - it->second >= wait) {
        it = told_.erase(it);
        released = true;
      } else {
        ++it;
      }
    }
    if (released) inFlight_ = std::min(2 * inFlight_, kMaxInFlight);  // they act without asking: tell more at once
  }
  while ((!paced || told_.size() < inFlight_) && !order_.empty()) {
    const ConnectionId connection = order_.front();
    order_.pop_front();
    auto owed = owed_.find(connection);
    if (owed == owed_.end()) continue;  // settled before its turn
    if (--owed->second == 0) owed_.erase(owed);
    --owedBytes_;
    due.push_back(connection);
    toldAt_[connection] = now;
    if (paced) told_[connection] = now;
  }
  return due;
}

size_t WakeQueue::settle(ConnectionId connection, Clock::time_point now) {
  if (auto it = toldAt_.find(connection); it != toldAt_.end()) {
    // One that took longer than the horizon was done with its wake-up long ago: what it asks now says nothing
    // about the pace.
    const Clock::duration took = now - it->second;
    if (took <= kComeBackHorizon) {
      const Clock::duration sample = std::min<Clock::duration>(took, kMaxPatience);
      comeBack_ = comeBack_ ? *comeBack_ + (sample - *comeBack_) / 8 : sample;
      inFlight_ = kInFlight;
    }
    toldAt_.erase(it);
  }
  told_.erase(connection);
  auto owed = owed_.find(connection);
  if (owed == owed_.end()) return 0;
  const size_t bytes = owed->second;
  owedBytes_ -= bytes;
  owed_.erase(owed);
  return bytes;
}

void WakeQueue::forget(ConnectionId connection) {
  told_.erase(connection);
  toldAt_.erase(connection);
  if (auto owed = owed_.find(connection); owed != owed_.end()) {
    owedBytes_ -= owed->second;
    owed_.erase(owed);
  }
}

std::optional<WakeQueue::Clock::time_point> WakeQueue::nextRelease() const {
  std::optional<Clock::time_point> first;
  for (const auto& [connection, at] : told_) {
    if (!first || at < *first) first = at;
  }
  if (first) *first += patience();
  return first;
}

WakeQueue::Clock::duration WakeQueue::patience() const {
  const Clock::duration wanted = comeBack_ ? 2 * *comeBack_ : Clock::duration(kMaxPatience);
  return std::clamp<Clock::duration>(wanted, kMinPatience, kMaxPatience);
}

}  // namespace ddprun::store
