#pragma once
// The store's data and its waiters, with no sockets: every mutating method reports which client
// sessions it woke, and the session layer writes their replies. Semantics follow PyTorch's TCPStore
// servers (torch/csrc/distributed/c10d/TCPStoreBackend.cpp and TCPStoreLibUvBackend.cpp).
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace ddprun::rendezvous {

/// Identifies one client connection.
using SessionId = uint64_t;

class KvState {
 public:
  /// Sessions whose WAIT (or BARRIER) is now satisfied and must be sent STOP_WAITING.
  using Woken = std::vector<SessionId>;

  void set(const std::string& key, std::string value, Woken& woken);
  /// Returns the value or nullopt.
  std::optional<std::string> get(const std::string& key) const;
  /// COMPARE_SET: see TCPStore; returns the reply value.
  std::string compareSet(const std::string& key, const std::string& expected, std::string desired, Woken& woken);
  /// ADD: the key's decimal value plus `delta` (a missing key counts as 0). Returns nullopt when the
  /// stored value is not a decimal integer.
  std::optional<int64_t> add(const std::string& key, int64_t delta, Woken& woken);
  void append(const std::string& key, const std::string& data, Woken& woken);
  bool deleteKey(const std::string& key);
  int64_t numKeys() const { return static_cast<int64_t>(data_.size()); }
  /// All keys, sorted.
  std::vector<std::string> listKeys() const;
  /// True when every key exists (a non-empty queue counts as existing).
  bool allExist(const std::vector<std::string>& keys) const;

  /// Registers `session` as waiting for the keys of `keys` that are missing now. Returns true when none is
  /// missing (reply at once) and false when the session must wait to be woken.
  bool registerWait(SessionId session, const std::vector<std::string>& keys);
  /// Drops every wait registration of `session`; returns whether it had any.
  bool cancelWait(SessionId session);

  void queuePush(const std::string& key, std::string value, Woken& woken);
  /// Pops the oldest value; returns {size before the pop, value (empty when the queue was empty)}.
  std::pair<int64_t, std::string> queuePop(const std::string& key);
  int64_t queueLength(const std::string& key) const;

  /// BARRIER: adds 1 to the counter at `key`. Once the count reaches `worldSize` every arrival
  /// (`session` included) is appended to `woken`; until then `session` waits. Returns false when the key
  /// holds a non-number.
  bool barrier(SessionId session, const std::string& key, int64_t worldSize, Woken& woken);

  /// Number of sessions currently waiting (for tests and logs).
  size_t waitingSessions() const { return pendingKeys_.size(); }

 private:
  void keyUpdated(const std::string& key, Woken& woken, bool wakeOnlyOne = false);

  std::unordered_map<std::string, std::string> data_;
  std::unordered_map<std::string, std::deque<std::string>> queues_;
  std::unordered_map<std::string, std::vector<SessionId>> waitersByKey_;
  std::unordered_map<SessionId, size_t> pendingKeys_;
  std::unordered_map<std::string, std::vector<SessionId>> barrierWaiters_;
};

}  // namespace ddprun::rendezvous
