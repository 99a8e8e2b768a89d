#include "store/kv_state.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace ddprun::store {

std::optional<int64_t> parseStoredInteger(const std::string& text) {
  // std::stoll (strtoll, base 10): torch's TCPStoreBackend.cpp and TCPStoreLibUvBackend.cpp read ADD's old value
  // with it, so " 12" + 1 is 13 there. Unlike stoll, a value that is out of range is refused, not thrown.
  size_t pos = 0;
  while (pos < text.size() && std::isspace(static_cast<unsigned char>(text[pos]))) ++pos;
  const bool negative = pos < text.size() && text[pos] == '-';
  if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) ++pos;
  const char* begin = text.data() + pos;
  const char* limit = text.data() + text.size();
  const char* digitsEnd = begin;
  while (digitsEnd < limit && *digitsEnd >= '0' && *digitsEnd <= '9') ++digitsEnd;
  if (digitsEnd == begin) return std::nullopt;
  // Parse with the sign so that INT64_MIN fits.
  std::string digits = negative ? "-" : "";
  digits.append(begin, digitsEnd);
  int64_t value = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return value;
}

void KvState::keyUpdated(const std::string& key, Woken& woken, bool wakeOnlyOne) {
  auto it = waitersByKey_.find(key);
  if (it == waitersByKey_.end()) return;
  auto& connections = it->second;
  size_t released = 0;
  for (ConnectionId connection : connections) {
    ++released;
    auto waiter = waiters_.find(connection);
    if (waiter != waiters_.end() && --waiter->second.missing == 0) {
      waiters_.erase(waiter);
      woken.push_back(connection);
    }
    if (wakeOnlyOne) break;
  }
  connections.erase(connections.begin(), connections.begin() + static_cast<std::ptrdiff_t>(released));
  if (connections.empty()) waitersByKey_.erase(it);
}

void KvState::put(const std::string& key, std::string value) {
  auto [it, added] = data_.try_emplace(key);
  if (added) {
    storedBytes_ += key.size() + kEntryOverheadBytes;
  } else {
    storedBytes_ -= it->second->size();
  }
  storedBytes_ += value.size();
  // A new string, never the old one changed in place: a reply being sent may still hold the old one.
  it->second = std::make_shared<std::string>(std::move(value));
}

void KvState::set(const std::string& key, std::string value, Woken& woken) {
  put(key, std::move(value));
  keyUpdated(key, woken);
}

const std::string* KvState::find(const std::string& key) const {
  auto it = data_.find(key);
  return it == data_.end() ? nullptr : it->second.get();
}

std::shared_ptr<const std::string> KvState::share(const std::string& key) const {
  auto it = data_.find(key);
  return it == data_.end() ? nullptr : it->second;
}

std::optional<std::string> KvState::get(const std::string& key) const {
  auto it = data_.find(key);
  if (it == data_.end()) return std::nullopt;
  return *it->second;
}

std::shared_ptr<const std::string> KvState::compareSet(const std::string& key, std::string expected,
                                                       std::string desired, Woken& woken) {
  auto it = data_.find(key);
  if (it == data_.end()) {
    if (!expected.empty()) return std::make_shared<const std::string>(std::move(expected));
    put(key, std::move(desired));
    keyUpdated(key, woken);
    return share(key);
  }
  if (*it->second == expected) {
    put(key, std::move(desired));
    keyUpdated(key, woken);
  }
  return share(key);
}

std::optional<int64_t> KvState::add(const std::string& key, int64_t delta, Woken& woken) {
  int64_t value = 0;
  auto it = data_.find(key);
  if (it != data_.end()) {
    auto current = parseStoredInteger(*it->second);
    if (!current) return std::nullopt;
    value = *current;
  }
  if (__builtin_add_overflow(value, delta, &value)) return std::nullopt;  // no wrap-around, no UB
  put(key, std::to_string(value));
  keyUpdated(key, woken);
  return value;
}

void KvState::append(const std::string& key, const std::string& data, Woken& woken) {
  const std::string* old = find(key);
  std::string value;
  value.reserve((old ? old->size() : 0) + data.size());
  if (old) value = *old;
  value += data;
  put(key, std::move(value));
  keyUpdated(key, woken);
}

bool KvState::deleteKey(const std::string& key) {
  auto it = data_.find(key);
  if (it == data_.end()) return false;
  storedBytes_ -= key.size() + kEntryOverheadBytes + it->second->size();
  data_.erase(it);
  return true;
}

uint64_t KvState::keyBytes() const {
  uint64_t total = 0;
  for (const auto& entry : data_) total += entry.first.size();
  return total;
}

std::vector<std::string> KvState::listKeys() const {
  std::vector<std::string> keys;
  keys.reserve(data_.size());
  for (const auto& [key, value] : data_) keys.push_back(key);
  std::sort(keys.begin(), keys.end());
  return keys;
}

bool KvState::allExist(const std::vector<std::string>& keys) const {
  return std::all_of(keys.begin(), keys.end(), [this](const std::string& key) {
    if (data_.count(key) > 0) return true;
    auto q = queues_.find(key);
    return q != queues_.end() && !q->second.empty();
  });
}

bool KvState::registerWait(ConnectionId connection, const std::vector<std::string>& keys) {
  Waiter* waiter = nullptr;
  for (const auto& key : keys) {
    if (allExist({key})) continue;
    waitersByKey_[key].push_back(connection);
    if (waiter == nullptr) waiter = &waiters_[connection];
    waiter->keys.push_back(key);
    ++waiter->missing;
  }
  return waiter == nullptr;
}

bool KvState::cancelWait(ConnectionId connection) {
  bool had = false;
  if (auto waiter = waiters_.find(connection); waiter != waiters_.end()) {
    for (const auto& key : waiter->second.keys) {
      auto it = waitersByKey_.find(key);
      if (it == waitersByKey_.end()) continue;  // arrived meanwhile
      auto& list = it->second;
      list.erase(std::remove(list.begin(), list.end(), connection), list.end());
      if (list.empty()) waitersByKey_.erase(it);
    }
    waiters_.erase(waiter);
    had = true;
  }
  if (auto barrier = barrierOf_.find(connection); barrier != barrierOf_.end()) {
    auto it = barrierWaiters_.find(barrier->second);
    if (it != barrierWaiters_.end()) {
      auto& list = it->second;
      list.erase(std::remove(list.begin(), list.end(), connection), list.end());
      if (list.empty()) barrierWaiters_.erase(it);
    }
    barrierOf_.erase(barrier);
    had = true;
  }
  return had;
}

void KvState::queuePush(const std::string& key, std::string value, Woken& woken) {
  auto [queue, added] = queues_.try_emplace(key);
  if (added) storedBytes_ += key.size() + kEntryOverheadBytes;
  storedBytes_ += value.size() + kQueueItemOverheadBytes;
  queue->second.push_back(std::move(value));
  keyUpdated(key, woken, /*wakeOnlyOne=*/true);  // one value serves one popper
}

std::pair<int64_t, std::string> KvState::queuePop(const std::string& key) {
  auto it = queues_.find(key);
  if (it == queues_.end() || it->second.empty()) return {0, std::string()};
  auto size = static_cast<int64_t>(it->second.size());
  std::string value = std::move(it->second.front());
  it->second.pop_front();
  storedBytes_ -= value.size() + kQueueItemOverheadBytes;
  if (it->second.empty()) {
    storedBytes_ -= key.size() + kEntryOverheadBytes;
    queues_.erase(it);
  }
  return {size, std::move(value)};
}

int64_t KvState::queueLength(const std::string& key) const {
  auto it = queues_.find(key);
  return it == queues_.end() ? 0 : static_cast<int64_t>(it->second.size());
}

uint64_t KvState::queueFrontSize(const std::string& key) const {
  auto it = queues_.find(key);
  return it == queues_.end() || it->second.empty() ? 0 : it->second.front().size();
}

bool KvState::barrier(ConnectionId connection, const std::string& key, int64_t worldSize, Woken& woken) {
  auto count = add(key, 1, woken);
  if (!count) return false;
  auto& arrivals = barrierWaiters_[key];
  arrivals.push_back(connection);
  barrierOf_[connection] = key;
  if (*count >= worldSize) {
    for (ConnectionId arrival : arrivals) barrierOf_.erase(arrival);
    woken.insert(woken.end(), arrivals.begin(), arrivals.end());
    barrierWaiters_.erase(key);
  }
  return true;
}

}  // namespace ddprun::store
