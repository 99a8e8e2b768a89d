#include "store/hash_store.hpp"

#include "store/store_errors.hpp"

namespace ddprun::store {

void HashStore::set(const std::string& key, const std::string& value) {
  KvState::Woken ignored;  // waiters here are threads (waiters_), not connections
  std::lock_guard<std::mutex> lock(mutex_);
  state_.set(key, value, ignored);
  wake(key);
}

void HashStore::erase(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  state_.deleteKey(key);
}

void HashStore::multiSet(const std::vector<std::pair<std::string, std::string>>& entries) {
  KvState::Woken ignored;
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [key, value] : entries) {
    state_.set(key, value, ignored);
    wake(key);
  }
}

void HashStore::wake(const std::string& key) {
  const auto [first, last] = waiters_.equal_range(key);
  for (auto it = first; it != last; ++it) it->second->notify_one();
}

std::optional<std::string> HashStore::get(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto value = state_.get(key);
  if (value && value->empty()) return std::nullopt;  // as over TCP
  return value;
}

std::string HashStore::compareSet(const std::string& key, const std::string& expected, const std::string& desired) {
  KvState::Woken ignored;
  std::lock_guard<std::mutex> lock(mutex_);
  const auto stored = state_.compareSet(key, expected, desired, ignored);
  wake(key);
  return *stored;
}

int64_t HashStore::add(const std::string& key, int64_t delta) {
  KvState::Woken ignored;
  std::optional<int64_t> value;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    value = state_.add(key, delta, ignored);
    if (value) wake(key);
  }
  if (!value) {
    throw StoreError("in-memory store: ADD on key '" + key +
                     "' whose value is not a decimal integer, or would leave the 64-bit range");
  }
  return *value;
}

std::vector<std::string> HashStore::multiGet(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (const auto& key : keys) values.push_back(state_.get(key).value_or(""));
  return values;
}

bool HashStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (state_.allExist(keys)) return true;
  if (&clock_ != &SystemClock::instance()) {
    lock.unlock();
    clock_.sleepFor(timeout);
    lock.lock();
    return state_.allExist(keys);
  }
  std::condition_variable changed;
  std::vector<std::multimap<std::string, std::condition_variable*>::iterator> registered;
  for (const auto& key : keys) registered.push_back(waiters_.emplace(key, &changed));
  const bool all = changed.wait_for(lock, timeout, [&] { return state_.allExist(keys); });
  for (auto it : registered) waiters_.erase(it);
  return all;
}

}  // namespace ddprun::store
