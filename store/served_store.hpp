#pragma once
// The Store interface over a StoreServer of this process, for code that runs on that server's own loop (the agent
// reading and writing the workers' store it serves), with no socket to itself.
#include "store/store.hpp"
#include "store/store_server.hpp"

namespace ddprun::store {

/// `server`'s keys as a Store. Every operation works directly on the server's key-value state, so it must be called
/// on the thread that runs the server's io_context: there it is atomic with every client's request, as if it were one
/// more request between theirs. A write (set, multiSet, compareSet, add) wakes the clients waiting on its keys, as a
/// client's SET would. Writes are not checked against the server's limits (they are this process's own keys), though
/// what they store counts in its memory budget. Nothing blocks the loop: see wait().
class ServedStore : public Store {
 public:
  /// `server` must outlive this store.
  explicit ServedStore(StoreServer& server) : server_(server) {}

  /// "store served in this process at host:port".
  std::string describe() const override;
  void set(const std::string& key, const std::string& value) override;
  std::optional<std::string> get(const std::string& key) override;
  std::string compareSet(const std::string& key, const std::string& expected, const std::string& desired) override;
  /// Throws StoreError when the key holds no decimal integer, or the sum would leave the int64 range.
  int64_t add(const std::string& key, int64_t delta) override;
  void erase(const std::string& key) override;
  /// One set() per entry, in order.
  void multiSet(const std::vector<std::pair<std::string, std::string>>& entries) override;
  std::vector<std::string> multiGet(const std::vector<std::string>& keys) override;
  /// Cannot wait: the keys could only arrive through the loop it would block. True when every key exists now; else
  /// false at once when `timeout` is zero (or negative), and StoreError at once for any longer timeout. A caller
  /// that must wait asks the server as a client does (StoreClient), from a thread of its own.
  bool wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

 private:
  StoreServer& server_;
};

}  // namespace ddprun::store
