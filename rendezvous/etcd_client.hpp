#pragma once
// A small blocking client for etcd v3's JSON gRPC-gateway (HTTP/1.1 + JSON, no gRPC dependency), with
// just the calls the etcd rendezvous backend needs. Protocol: etcd docs dev-guide/api_grpc_gateway and
// api_reference_v3 (etcd >= 3.4 serves it under /v3/). Keys and values travel base64-encoded; int64 fields
// come back as JSON strings. Unary calls share one persistent connection (re-opened after any failure); a
// watch uses a connection of its own that lives only for that call.
#include <boost/asio/io_context.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace ddprun::rendezvous {

/// One key's current version in etcd.
struct EtcdKeyValue {
  std::string value;
  int64_t modRevision = 0;     ///< revision of the last write to the key
  int64_t createRevision = 0;  ///< revision that created the key (0: absent)
};

/// Blocking etcd v3 client. Every call is bounded by the constructor's timeout and throws
/// RendezvousBackendError ("etcd-v3 at host:port: <operation> failed: <reason>") when etcd cannot be
/// reached, does not answer in time, or answers with an error. One instance is used by one thread.
class EtcdClient {
 public:
  /// `timeout`: the most one call may take (connect, send and answer together).
  EtcdClient(std::string host, uint16_t port, std::chrono::milliseconds timeout);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  /// "etcd-v3 at host:port", the prefix of every error message.
  std::string describe() const;

  /// A key read with the store revision it was read at.
  struct Range {
    std::optional<EtcdKeyValue> kv;  ///< empty when the key is absent
    int64_t revision = 0;            ///< the store's revision when it answered
  };
  /// Reads one key (POST /v3/kv/range).
  Range get(const std::string& key);

  /// The keys (not values) that start with `prefix` (POST /v3/kv/range with range_end = prefix + 1).
  std::vector<std::string> keysWithPrefix(const std::string& prefix);

  /// Writes `key`; `lease` 0 means none (POST /v3/kv/put). Returns the revision of the write.
  int64_t put(const std::string& key, const std::string& value, int64_t lease = 0);

  /// The outcome of compareAndSwap: `current` is the key after the call (the written value when
  /// `swapped`, else what the other writer stored, empty when absent).
  struct Swap {
    bool swapped = false;
    std::optional<EtcdKeyValue> current;
  };
  /// Writes `value` only if `key`'s mod_revision equals `expectedModRevision`, or, when that is empty,
  /// only if `key` does not exist (create_revision == 0). One POST /v3/kv/txn whose failure branch reads
  /// the key, so the loser learns the winner's value without a second round trip.
  Swap compareAndSwap(const std::string& key, std::optional<int64_t> expectedModRevision, const std::string& value);

  /// Deletes `key` (POST /v3/kv/deleterange); absent keys are fine.
  void remove(const std::string& key);

  /// Grants a lease of `ttl` (etcd may round it up to its minimum, 2 s by default); returns its id
  /// (POST /v3/lease/grant).
  int64_t grantLease(std::chrono::seconds ttl);

  /// Renews lease `id` once (POST /v3/lease/keepalive). Returns its remaining TTL in seconds; <= 0 means
  /// the lease has expired or never existed.
  int64_t keepAliveLease(int64_t id);

  /// Revokes lease `id`, deleting the keys attached to it (POST /v3/lease/revoke). A lease that is
  /// already gone is not an error.
  void revokeLease(int64_t id);

  /// Watches `key` from `fromRevision` (POST /v3/watch, a stream of newline-delimited JSON objects).
  /// Returns true at the first event (or when etcd cancels the watch, e.g. because `fromRevision` was
  /// compacted: the key may have changed), false when `wait` passes without one. Connecting and sending
  /// the request are bounded by the constructor's timeout, waiting by `wait`.
  bool watch(const std::string& key, int64_t fromRevision, std::chrono::milliseconds wait);

 private:
  using Clock = std::chrono::steady_clock;
  /// Whether a request may be sent again after a kept-alive connection turned out to be dead: only when
  /// running it twice is harmless, because the first copy may have reached etcd.
  enum class Retry { Safe, Never };

  template <class Fn>
  auto guarded(const std::string& operation, Fn&& fn) -> decltype(fn());
  nlohmann::json call(const std::string& path, const nlohmann::json& body, Retry retry);
  nlohmann::json callOnce(const std::string& path, const std::string& body, Clock::time_point deadline);
  void connect(boost::beast::tcp_stream& stream, Clock::time_point deadline);
  [[noreturn]] void fail(const std::string& operation, const std::string& reason) const;

  std::string host_;
  uint16_t port_;
  std::chrono::milliseconds timeout_;
  boost::asio::io_context io_;
  std::unique_ptr<boost::beast::tcp_stream> unary_;  // null while disconnected
  boost::beast::flat_buffer unaryBuffer_;
};

}  // namespace ddprun::rendezvous
