#pragma once
// The store's data and its waiters, with no sockets: every mutating method reports which client
// connections it woke, and the connection layer writes their replies. Waiters are indexed both by key
// (who to wake) and by connection (what to drop when it closes), so closing a connection that never
// waited costs one lookup. Semantics follow PyTorch's TCPStore
// servers (torch/csrc/distributed/c10d/TCPStoreBackend.cpp and TCPStoreLibUvBackend.cpp).
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace ddprun::store {

/// Identifies one client connection.
using ConnectionId = uint64_t;

/// What the store counts for each key (and each queue) beyond its bytes: the hash node, the shared value's
/// control block and the string headers. An estimate that errs high, so the budget holds in real memory.
inline constexpr uint64_t kEntryOverheadBytes = 96;
/// The same for each value waiting in a queue.
inline constexpr uint64_t kQueueItemOverheadBytes = 32;

/// ADD's reading of a stored value, as torch's servers read it (std::stoll): leading white space, an optional
/// sign and decimal digits; whatever follows the digits is ignored (" 12" and "12abc" are 12). nullopt when
/// there are no digits or the number leaves the int64 range.
std::optional<int64_t> parseStoredInteger(const std::string& text);

class KvState {
 public:
  /// Connections whose WAIT (or BARRIER) is now satisfied and must be sent STOP_WAITING.
  using Woken = std::vector<ConnectionId>;

  void set(const std::string& key, std::string value, Woken& woken);
  /// Returns the value or nullopt.
  std::optional<std::string> get(const std::string& key) const;
  /// The stored value without a copy, or nullptr (for sizing a reply before building it).
  const std::string* find(const std::string& key) const;
  /// The stored value, shared with the reply that sends it (no copy however large); nullptr when missing. The
  /// store never changes a value a reply holds: a later SET or APPEND makes a new one.
  std::shared_ptr<const std::string> share(const std::string& key) const;
  /// COMPARE_SET: see TCPStore; returns the reply value, the stored one shared (no copy however large: a client
  /// that sends a compare-set against a 60 MiB value and closes costs the store no copy of it).
  std::shared_ptr<const std::string> compareSet(const std::string& key, std::string expected, std::string desired,
                                                Woken& woken);
  /// ADD: the key's decimal value plus `delta` (a missing key counts as 0). Returns nullopt (and changes
  /// nothing) when the stored value is not a decimal integer or the sum leaves the int64 range.
  std::optional<int64_t> add(const std::string& key, int64_t delta, Woken& woken);
  void append(const std::string& key, const std::string& data, Woken& woken);
  bool deleteKey(const std::string& key);
  int64_t numKeys() const { return static_cast<int64_t>(data_.size()); }
  /// Keys and queues together (what max-keys bounds).
  uint64_t keyCount() const { return data_.size() + queues_.size(); }
  /// Bytes of everything stored: keys, values, queued values and their overheads (what the memory budget
  /// counts besides the connections' buffers).
  uint64_t storedBytes() const { return storedBytes_; }
  /// Whether `key` holds a value (not a queue).
  bool hasValue(const std::string& key) const { return data_.count(key) > 0; }
  /// Whether `key` names a queue with values in it.
  bool hasQueue(const std::string& key) const { return queues_.count(key) > 0; }
  /// Total length of all keys (bytes).
  uint64_t keyBytes() const;
  /// All keys, sorted.
  std::vector<std::string> listKeys() const;
  /// True when every key exists (a non-empty queue counts as existing).
  bool allExist(const std::vector<std::string>& keys) const;

  /// Registers `connection` as waiting for the keys of `keys` that are missing now. Returns true when none is
  /// missing (reply at once) and false when the connection must wait to be woken.
  bool registerWait(ConnectionId connection, const std::vector<std::string>& keys);
  /// Drops every wait registration of `connection` (WAIT and BARRIER); returns whether it had any. Costs one
  /// lookup for a connection that has none.
  bool cancelWait(ConnectionId connection);
  /// Whether `connection` has a WAIT that has not been answered.
  bool isWaiting(ConnectionId connection) const { return waiters_.count(connection) > 0; }

  void queuePush(const std::string& key, std::string value, Woken& woken);
  /// Pops the oldest value; returns {size before the pop, value (empty when the queue was empty)}.
  std::pair<int64_t, std::string> queuePop(const std::string& key);
  int64_t queueLength(const std::string& key) const;
  /// Size of the value QUEUE_POP would return now (0 for an empty queue).
  uint64_t queueFrontSize(const std::string& key) const;

  /// BARRIER: adds 1 to the counter at `key`. Once the count reaches `worldSize` every arrival
  /// (`connection` included) is appended to `woken`; until then `connection` waits. Returns false when the key
  /// holds a non-number (or the count would leave the int64 range).
  bool barrier(ConnectionId connection, const std::string& key, int64_t worldSize, Woken& woken);

  /// Number of connections currently waiting (for tests and logs).
  size_t waitingConnections() const { return waiters_.size(); }

 private:
  void keyUpdated(const std::string& key, Woken& woken, bool wakeOnlyOne = false);
  /// Stores `value` at `key` (new or replacing), keeping storedBytes_.
  void put(const std::string& key, std::string value);

  /// Values are shared with replies in flight, so a large GET is never copied.
  std::unordered_map<std::string, std::shared_ptr<std::string>> data_;
  std::unordered_map<std::string, std::deque<std::string>> queues_;
  /// One connection's unanswered WAIT.
  struct Waiter {
    size_t missing = 0;             ///< keys still to arrive
    std::vector<std::string> keys;  ///< the keys it registered for (some may have arrived since)
  };
  std::unordered_map<std::string, std::vector<ConnectionId>> waitersByKey_;
  std::unordered_map<ConnectionId, Waiter> waiters_;
  std::unordered_map<std::string, std::vector<ConnectionId>> barrierWaiters_;
  std::unordered_map<ConnectionId, std::string> barrierOf_;  ///< the barrier key each arrival waits at
  uint64_t storedBytes_ = 0;
};

}  // namespace ddprun::store
