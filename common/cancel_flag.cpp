#include "common/cancel_flag.hpp"

namespace ddprun {

CancelFlag::Subscription::~Subscription() {
  if (flag_ == nullptr) return;
  std::lock_guard<std::mutex> lock(flag_->mutex_);
  flag_->wakers_.erase(id_);
}

CancelFlag& CancelFlag::operator=(bool value) {
  std::lock_guard<std::mutex> lock(mutex_);
  value_ = value;
  if (value) {
    for (auto& [id, wake] : wakers_) wake();
  }
  return *this;
}

CancelFlag::Subscription CancelFlag::onSet(std::function<void()> wake) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t id = nextId_++;
  // Set already: the caller looks at the flag after subscribing, so a wake now is not needed, but harmless.
  if (value_) wake();
  wakers_.emplace(id, std::move(wake));
  return Subscription(this, id);
}

}  // namespace ddprun
