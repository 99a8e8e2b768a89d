#include "rendezvous/kv_state.hpp"

#include <algorithm>
#include <charconv>

namespace ddprun::rendezvous {
namespace {

std::optional<int64_t> parseDecimal(const std::string& text) {
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace

void KvState::keyUpdated(const std::string& key, Woken& woken, bool wakeOnlyOne) {
  auto it = waitersByKey_.find(key);
  if (it == waitersByKey_.end()) return;
  auto& sessions = it->second;
  size_t released = 0;
  for (SessionId session : sessions) {
    ++released;
    auto pending = pendingKeys_.find(session);
    if (pending != pendingKeys_.end() && --pending->second == 0) {
      pendingKeys_.erase(pending);
      woken.push_back(session);
    }
    if (wakeOnlyOne) break;
  }
  sessions.erase(sessions.begin(), sessions.begin() + static_cast<std::ptrdiff_t>(released));
  if (sessions.empty()) waitersByKey_.erase(it);
}

void KvState::set(const std::string& key, std::string value, Woken& woken) {
  data_[key] = std::move(value);
  keyUpdated(key, woken);
}

std::optional<std::string> KvState::get(const std::string& key) const {
  auto it = data_.find(key);
  if (it == data_.end()) return std::nullopt;
  return it->second;
}

std::string KvState::compareSet(const std::string& key, const std::string& expected, std::string desired,
                                Woken& woken) {
  auto it = data_.find(key);
  if (it == data_.end()) {
    if (!expected.empty()) return expected;
    data_[key] = desired;
    keyUpdated(key, woken);
    return desired;
  }
  if (it->second == expected) {
    it->second = std::move(desired);
    keyUpdated(key, woken);
  }
  return it->second;
}

std::optional<int64_t> KvState::add(const std::string& key, int64_t delta, Woken& woken) {
  int64_t value = 0;
  auto it = data_.find(key);
  if (it != data_.end()) {
    auto current = parseDecimal(it->second);
    if (!current) return std::nullopt;
    value = *current;
  }
  value += delta;
  data_[key] = std::to_string(value);
  keyUpdated(key, woken);
  return value;
}

void KvState::append(const std::string& key, const std::string& data, Woken& woken) {
  data_[key] += data;
  keyUpdated(key, woken);
}

bool KvState::deleteKey(const std::string& key) { return data_.erase(key) > 0; }

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

bool KvState::registerWait(SessionId session, const std::vector<std::string>& keys) {
  size_t missing = 0;
  for (const auto& key : keys) {
    if (allExist({key})) continue;
    waitersByKey_[key].push_back(session);
    ++missing;
  }
  if (missing == 0) return true;
  pendingKeys_[session] += missing;
  return false;
}

bool KvState::cancelWait(SessionId session) {
  bool had = pendingKeys_.erase(session) > 0;
  for (auto* table : {&waitersByKey_, &barrierWaiters_}) {
    for (auto it = table->begin(); it != table->end();) {
      auto& sessions = it->second;
      auto removed = std::remove(sessions.begin(), sessions.end(), session);
      had = had || removed != sessions.end();
      sessions.erase(removed, sessions.end());
      it = sessions.empty() ? table->erase(it) : std::next(it);
    }
  }
  return had;
}

void KvState::queuePush(const std::string& key, std::string value, Woken& woken) {
  queues_[key].push_back(std::move(value));
  keyUpdated(key, woken, /*wakeOnlyOne=*/true);  // one value serves one popper
}

std::pair<int64_t, std::string> KvState::queuePop(const std::string& key) {
  auto it = queues_.find(key);
  if (it == queues_.end() || it->second.empty()) return {0, std::string()};
  auto size = static_cast<int64_t>(it->second.size());
  std::string value = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) queues_.erase(it);
  return {size, std::move(value)};
}

int64_t KvState::queueLength(const std::string& key) const {
  auto it = queues_.find(key);
  return it == queues_.end() ? 0 : static_cast<int64_t>(it->second.size());
}

bool KvState::barrier(SessionId session, const std::string& key, int64_t worldSize, Woken& woken) {
  auto count = add(key, 1, woken);
  if (!count) return false;
  auto& arrivals = barrierWaiters_[key];
  arrivals.push_back(session);
  if (*count >= worldSize) {
    woken.insert(woken.end(), arrivals.begin(), arrivals.end());
    barrierWaiters_.erase(key);
  }
  return true;
}

}  // namespace ddprun::rendezvous
