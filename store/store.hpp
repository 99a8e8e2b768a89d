#pragma once
// What ddprun asks of a key-value store, whatever holds the keys: the TCP client (StoreClient), an
// in-memory map (HashStore, the test double) or a namespace over another store (PrefixStore). Modelled on
// c10d's Store.hpp and gloo's rendezvous/store.h, reduced to the operations ddprun calls.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ddprun::store {

/// Blocking operations, each bounded by the store's operation timeout. Every method may throw StoreError
/// (StoreTimeout, StoreConnectionError). One instance is used by one thread at a time unless the
/// implementation says otherwise.
class Store {
 public:
  virtual ~Store() = default;

  /// For messages: "c10d store at host:port", "in-memory store".
  virtual std::string describe() const = 0;

  virtual void set(const std::string& key, const std::string& value) = 0;
  /// The value, or nullopt when the key does not exist. An empty value reads as missing: TCPStore's GET
  /// answers both the same way.
  virtual std::optional<std::string> get(const std::string& key) = 0;
  /// TCPStore COMPARE_SET: stores `desired` when the key holds `expected` (or is missing and `expected` is
  /// empty); returns the value stored afterwards (== desired on success; `expected` when the key is
  /// missing and `expected` is not empty).
  virtual std::string compareSet(const std::string& key, const std::string& expected, const std::string& desired) = 0;
  /// Adds `delta` to the decimal integer at `key` (a missing key counts as 0); returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  /// Deletes `key` (c10d's deleteKey); a missing key is no error.
  virtual void erase(const std::string& key) = 0;
  /// Sets every (key, value) of `entries`, in order, as one request where the store allows (TCPStore 2.x
  /// MULTI_SET): a node publishing a thousand keys pays one round trip, not a thousand.
  virtual void multiSet(const std::vector<std::pair<std::string, std::string>>& entries) = 0;
  /// Values of `keys` in order (empty for a missing key).
  virtual std::vector<std::string> multiGet(const std::vector<std::string>& keys) = 0;
  /// Waits until every key exists; false when `timeout` passed first.
  virtual bool wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
};

}  // namespace ddprun::store
