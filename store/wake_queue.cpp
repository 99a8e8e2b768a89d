#include "store/wake_queue.hpp"

#include <algorithm>

namespace ddprun::store {

void WakeQueue::add(KvState::Woken woken) {
  std::sort(woken.begin(), woken.end());
  for (ConnectionId connection : woken) {
    if (owed_.insert(connection).second) order_.push_back(connection);
  }
}

std::vector<ConnectionId> WakeQueue::take(Clock::time_point now) {
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
  std::vector<ConnectionId> due;
  while (told_.size() < inFlight_ && !order_.empty()) {
    const ConnectionId connection = order_.front();
    order_.pop_front();
    if (owed_.erase(connection) == 0) continue;  // settled before its turn
    due.push_back(connection);
    told_[connection] = now;
  }
  return due;
}

bool WakeQueue::settle(ConnectionId connection, Clock::time_point now) {
  if (auto it = told_.find(connection); it != told_.end()) {
    // One that took longer was done with its wake-up long ago; what it asks now says nothing about the pace.
    const Clock::duration took = now - it->second;
    if (took <= kMaxPatience) {
      comeBack_ = comeBack_ ? *comeBack_ + (took - *comeBack_) / 8 : took;
      inFlight_ = kInFlight;
    }
    told_.erase(it);
  }
  return owed_.erase(connection) > 0;
}

WakeQueue::Clock::duration WakeQueue::patience() const {
  const Clock::duration wanted = comeBack_ ? 2 * *comeBack_ : Clock::duration(kMinPatience);
  return std::clamp<Clock::duration>(wanted, kMinPatience, kMaxPatience);
}

std::optional<WakeQueue::Clock::time_point> WakeQueue::nextRelease() const {
  std::optional<Clock::time_point> first;
  for (const auto& [connection, at] : told_) {
    if (!first || at < *first) first = at;
  }
  if (first) *first += patience();
  return first;
}

}  // namespace ddprun::store
