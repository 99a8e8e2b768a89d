#include "rendezvous/etcd_store.hpp"

#include <thread>

#include "rendezvous/rendezvous_backend.hpp"
#include "store/store_errors.hpp"

namespace ddprun::rendezvous {
namespace {

/// Runs `call` and rethrows the client's RendezvousBackendError as a store error (the rendezvous' border,
/// store_border.hpp, turns it back), so the ticket rendezvous sees one kind of backend failure.
template <typename Call>
auto asStoreError(Call&& call) -> decltype(call()) {
  try {
    return call();
  } catch (const RendezvousBackendError& e) {
    throw store::StoreConnectionError(e.what());
  }
}

int64_t decimal(const std::string& key, const std::string& value) {
  if (value.empty()) return 0;
  try {
    size_t used = 0;
    const int64_t n = std::stoll(value, &used);
    if (used == value.size()) return n;
  } catch (const std::exception&) {
  }
  throw store::StoreError("etcd key '" + key + "' holds '" + value.substr(0, 40) + "', not a decimal integer");
}

}  // namespace

EtcdStore::EtcdStore(std::string host, uint16_t port, std::chrono::milliseconds readTimeout, const CancelFlag* cancel)
    : client_(std::move(host), port, readTimeout), random_(std::random_device{}()), cancel_(cancel) {}

void EtcdStore::set(const std::string& key, const std::string& value) {
  asStoreError([&] { return client_.put(key, value); });
}

std::optional<std::string> EtcdStore::get(const std::string& key) {
  const auto range = asStoreError([&] { return client_.get(key); });
  if (!range.kv || range.kv->value.empty()) return std::nullopt;  // an empty value reads as missing, as over TCP
  return range.kv->value;
}

std::string EtcdStore::compareSet(const std::string& key, const std::string& expected, const std::string& desired) {
  for (int attempt = 0;; ++attempt) {
    std::optional<int64_t> modRevision;  // nullopt: only if absent
    if (!expected.empty()) {
      const auto range = asStoreError([&] { return client_.get(key); });
      if (!range.kv) return expected;  // TCPStore's answer for a missing key and a non-empty expectation
      if (range.kv->value != expected) return range.kv->value;
      modRevision = range.kv->modRevision;
    }
    const auto swap = asStoreError([&] { return client_.compareAndSwap(key, modRevision, desired); });
    if (swap.swapped) return desired;
    if (expected.empty()) return swap.current ? swap.current->value : std::string();
    pauseAfterConflict(attempt);  // the value was rewritten between the read and the txn: judge again
  }
}

int64_t EtcdStore::add(const std::string& key, int64_t delta) {
  auto range = asStoreError([&] { return client_.get(key); });
  for (int attempt = 0;; ++attempt) {
    const int64_t now = range.kv ? decimal(key, range.kv->value) : 0;
    if (delta == 0) return now;
    const std::optional<int64_t> modRevision = range.kv ? std::optional<int64_t>(range.kv->modRevision) : std::nullopt;
    const auto swap =
        asStoreError([&] { return client_.compareAndSwap(key, modRevision, std::to_string(now + delta)); });
    if (swap.swapped) return now + delta;
    range.kv = swap.current;  // the loser learns the winner's value from the same txn
    pauseAfterConflict(attempt);
  }
}

void EtcdStore::erase(const std::string& key) {
  asStoreError([&] { client_.remove(key); });
}

void EtcdStore::pauseAfterConflict(int attempt) {
  // Random, growing pauses spread concurrent adders (hundreds of nodes taking tickets at once) apart.
  const int capMs = std::min(1 << std::min(attempt, 6), 50);
  std::uniform_int_distribution<int> pause(0, capMs * 1000);
  std::this_thread::sleep_for(std::chrono::microseconds(pause(random_)));
}

void EtcdStore::multiSet(const std::vector<std::pair<std::string, std::string>>& entries) {
  for (const auto& [key, value] : entries) set(key, value);
}

std::vector<std::string> EtcdStore::multiGet(const std::vector<std::string>& keys) {
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (const auto& key : keys) values.push_back(get(key).value_or(""));
  return values;
}

bool EtcdStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (const auto& key : keys) {
    while (true) {
      const auto range = asStoreError([&] { return client_.get(key); });
      if (range.kv && !range.kv->value.empty()) break;
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      if (cancel_ != nullptr && *cancel_) throw store::StoreCancelled(describe() + ": cancelled while waiting");
      // From the revision after the read: a put since then returns at once. At most a second per watch, so a
      // stop is noticed.
      const auto step = cancel_ != nullptr ? std::min(left, std::chrono::milliseconds(1000)) : left;
      asStoreError([&] { return client_.watch(key, range.revision + 1, step); });
    }
  }
  return true;
}

}  // namespace ddprun::rendezvous
