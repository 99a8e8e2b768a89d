#pragma once
// ddprun's Store operations on etcd v3, so the ticket rendezvous (ticket_rendezvous.hpp) runs on etcd with the
// same keys as on ddprun's store: GET/SET are a range and a put; COMPARE_SET is one txn (compare the key's
// create_revision for "absent", else its mod_revision after a read); ADD is a read and a txn on the
// mod_revision, retried with a short random pause on a conflict (etcd has no atomic increment); WAIT watches
// each missing key from the revision it was read at. Errors are store::StoreConnectionError naming
// "etcd-v3 at host:port" and the operation, which the rendezvous turns into RendezvousBackendError.
#include <atomic>
#include <chrono>
#include <random>
#include <string>

#include "common/cancel_flag.hpp"
#include "rendezvous/etcd_client.hpp"
#include "store/store.hpp"

namespace ddprun::rendezvous {

class EtcdStore : public store::Store {
 public:
  /// Keys are etcd keys as given (the rendezvous puts its own "/ddprun.rdzv.<runId>/" in front); every call to
  /// etcd is bounded by `readTimeout`. `cancel` (optional) ends a WAIT in progress within a second
  /// (StoreCancelled).
  EtcdStore(std::string host, uint16_t port, std::chrono::milliseconds readTimeout, const CancelFlag* cancel = nullptr);

  std::string describe() const override { return client_.describe(); }
  void set(const std::string& key, const std::string& value) override;
  std::optional<std::string> get(const std::string& key) override;
  std::string compareSet(const std::string& key, const std::string& expected, const std::string& desired) override;
  int64_t add(const std::string& key, int64_t delta) override;
  /// A deleterange of the one key.
  void erase(const std::string& key) override;
  /// One put per entry.
  void multiSet(const std::vector<std::pair<std::string, std::string>>& entries) override;
  /// One range per key (etcd's gateway has no multi-key read of unrelated keys).
  std::vector<std::string> multiGet(const std::vector<std::string>& keys) override;
  bool wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

 private:
  void pauseAfterConflict(int attempt);

  EtcdClient client_;
  std::minstd_rand random_;
  const CancelFlag* cancel_;
};

}  // namespace ddprun::rendezvous
