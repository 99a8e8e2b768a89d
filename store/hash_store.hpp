#pragma once
// An in-memory Store for one process: the test double for everything above the socket (after gloo's
// rendezvous/hash_store). It keeps its keys in the same KvState the server uses, so COMPARE_SET and ADD
// behave exactly as over TCP. Thread-safe: several nodes (threads) may share one instance.
#include <condition_variable>
#include <map>
#include <mutex>

#include "common/clock.hpp"
#include "store/kv_state.hpp"
#include "store/store.hpp"

namespace ddprun::store {

class HashStore : public Store {
 public:
  /// `clock` times wait(). With the system clock a wait blocks until the keys arrive or the timeout passes;
  /// with any other (fake) clock, a wait that cannot be satisfied at once sleeps its whole timeout on that
  /// clock and then answers, so single-threaded tests never block.
  explicit HashStore(Clock& clock = SystemClock::instance()) : clock_(clock) {}

  std::string describe() const override { return "in-memory store"; }
  int64_t add(const std::string& key, int64_t delta) override;
  void set(const std::string& key, const std::string& value) override;
  void erase(const std::string& key) override;
  std::optional<std::string> get(const std::string& key) override;
  std::string compareSet(const std::string& key, const std::string& expected, const std::string& desired) override;
  void multiSet(const std::vector<std::pair<std::string, std::string>>& entries) override;
  std::vector<std::string> multiGet(const std::vector<std::string>& keys) override;
  bool wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

 private:
  /// Wakes the waiters registered on `key` (called with mutex_ held). Only those: as the server wakes the
  /// connections waiting on a key, so a thousand waiting threads are not all woken by every write.
  void wake(const std::string& key);

  Clock& clock_;
  std::mutex mutex_;
  std::multimap<std::string, std::condition_variable*> waiters_;  ///< key -> each waiting thread's variable
  KvState state_;
};

}  // namespace ddprun::store
