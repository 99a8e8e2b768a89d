#include "store/served_store.hpp"

#include "store/log_text.hpp"
#include "store/store_errors.hpp"

namespace ddprun::store {

std::string ServedStore::describe() const {
  return "store served in this process at " + server_.host() + ":" + std::to_string(server_.port());
}

void ServedStore::set(const std::string& key, const std::string& value) { server_.set(key, value); }

std::optional<std::string> ServedStore::get(const std::string& key) {
  auto value = server_.get(key);
  if (value && value->empty()) return std::nullopt;  // as over TCP
  return value;
}

std::string ServedStore::compareSet(const std::string& key, const std::string& expected, const std::string& desired) {
  return server_.compareSet(key, expected, desired);
}

int64_t ServedStore::add(const std::string& key, int64_t delta) {
  const std::optional<int64_t> sum = server_.add(key, delta);
  if (!sum) {
    throw StoreError(describe() + ": ADD on key '" + escapeForLog(key) +
                     "' whose value is not a decimal integer, or would leave the 64-bit range");
  }
  return *sum;
}

void ServedStore::erase(const std::string& key) { server_.erase(key); }

void ServedStore::multiSet(const std::vector<std::pair<std::string, std::string>>& entries) {
  for (const auto& [key, value] : entries) server_.set(key, value);
}

std::vector<std::string> ServedStore::multiGet(const std::vector<std::string>& keys) {
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (const auto& key : keys) values.push_back(server_.get(key).value_or(""));
  return values;
}

bool ServedStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  if (server_.state().allExist(keys)) return true;
  if (timeout.count() <= 0) return false;
  throw StoreError(describe() + ": cannot wait " + std::to_string(timeout.count()) +
                   " ms for missing keys on the store's own loop (they could only arrive through it)");
}

}  // namespace ddprun::store
