#pragma once
// Whether the nodes of a ticket rendezvous (ticket_rendezvous.hpp) are alive, apart from the round protocol: this
// node's own signs of life (its heartbeat counter alive/<id>, every keep_alive_interval unless the store's host
// counts its requests as heartbeats, node_connections.hpp; its present/<id> key under a lease on etcd,
// node_lease.hpp) and its verdicts on other nodes (a gone/<id> mark from the store's host, a lapsed lease, or a
// heartbeat counter that has not moved for the liveness expiry by this node's own clock). What a verdict does to a
// round is the caller's: this class ends no round.
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.hpp"
#include "rendezvous/node_lease.hpp"
#include "rendezvous/rendezvous_backend.hpp"
#include "rendezvous/store_border.hpp"
#include "store/prefix_store.hpp"

namespace ddprun::rendezvous {

/// Another node as this node judges it by its heartbeat counter.
struct WatchedNode {
  std::string id;
  std::string counter;           ///< its counter as last read ("" before the first read, or none written yet)
  Clock::TimePoint changedAt{};  ///< when the counter last moved, by this node's clock; the epoch: from the next read
};

/// One node's liveness in a ticket rendezvous: its own heartbeats and lease, and its verdicts on others.
class NodeLiveness {
 public:
  /// How a watched node stands.
  enum class Verdict {
    kAlive,
    kConnectionClosed,     ///< the store's host marked it gone: the connection it heartbeats over closed
    kLeaseLapsed,          ///< its present/<id> key is gone (etcd: its lease was not renewed)
    kStoppedHeartbeating,  ///< its counter has not moved for the liveness expiry
  };

  /// Keys are read and written through `store` (the run's keys: alive/<id>, gone/<id>, present/<id>), time comes
  /// from `clock`. `lease` (etcd-v3; null on ddprun's store, whose host marks closed connections instead) holds this
  /// node's present/<id> key, the full backend key being store.join(present/<id>).
  NodeLiveness(store::PrefixStore& store, Clock& clock, LivenessSettings settings, std::shared_ptr<NodeLease> lease);

  /// Runs `fn` (store operations) through callStore (store_border.hpp). Every store request of this node goes
  /// through here: on ddprun's store a request that reaches the store counts as this node's heartbeat, and after a
  /// failure none does until the node ADDs again (the client reconnects, and the host has not seen the new
  /// connection heartbeat).
  template <typename Call>
  auto call(Call&& fn) -> decltype(fn());

  /// This node is `nodeId` from now on: its heartbeats start afresh (the next keepAliveIfDue ADDs).
  void startAs(const std::string& nodeId);
  /// With a lease: writes this node's present/<id> under it (once per node id), before the node takes a ticket, so
  /// whoever watches the node finds the key from the start. Throws RendezvousBackendError.
  void holdLease();
  /// ADDs to this node's heartbeat counter once keep_alive_interval has passed since the last heartbeat (a request
  /// the store's host counted as one included). Nothing before startAs(). Throws RendezvousBackendError.
  void keepAliveIfDue();
  /// With a lease: how long after this node's death its present/<id> key is gone, at most.
  std::optional<std::chrono::milliseconds> leaseLapsesWithin() const;

  /// A node to judge from now on (its counter not read yet: the expiry runs from now until it is).
  WatchedNode watch(const std::string& id) const;
  /// Appends the keys that judge node `id` (its counter, its gone mark, and its present/<id> with a lease), for the
  /// caller to read in its own MULTI_GET with whatever else it needs.
  void appendKeysOf(std::vector<std::string>& wanted, const std::string& id) const;
  /// Judges `node` by the values of appendKeysOf's keys, starting at `values[at]`, read at `now`; notes its counter.
  Verdict judge(WatchedNode& node, const std::vector<std::string>& values, size_t at, Clock::TimePoint now);
  /// Reads `node`'s heartbeat counter (one GET): true once it has not moved for the liveness expiry, counted from
  /// the first read when it was never read before (a node seen for the first time, whose counter may not be written
  /// yet, is not judged by a time before this node knew of it). The gone and lease keys are not read.
  bool heartbeatStopped(WatchedNode& node);
  /// The first of `ids` already gone (marked gone, or its lease lapsed), read in one MULTI_GET; nullopt when none
  /// is. Heartbeats are not judged: one read says nothing about a counter's age.
  std::optional<std::string> firstGoneOf(const std::vector<std::string>& ids);

 private:
  /// Notes `counterNow` for `node`; true once the counter has not moved for the expiry.
  bool stale(WatchedNode& node, const std::string& counterNow, Clock::TimePoint now) const;
  void appendGoneKeys(std::vector<std::string>& wanted, const std::string& id) const;
  /// How a node is gone by the values appendGoneKeys asked for, from `values[at]`.
  Verdict goneIn(const std::vector<std::string>& values, size_t at) const;

  store::PrefixStore& store_;
  Clock& clock_;
  LivenessSettings settings_;
  std::shared_ptr<NodeLease> lease_;
  std::string leaseHeldFor_;  ///< the node id whose present/<id> the lease holds
  std::string self_;          ///< this node's id ("" before startAs)
  Clock::TimePoint lastKeepAlive_{};
  Clock::TimePoint lastRequest_{};  ///< the last store request that succeeded
  int64_t aliveCounter_ = 0;        ///< this node's heartbeat counter as its last ADD returned
  bool requestsCount_ = false;      ///< the store's host counts this node's requests as heartbeats
};

template <typename Call>
auto NodeLiveness::call(Call&& fn) -> decltype(fn()) {
  try {
    if constexpr (std::is_void_v<decltype(fn())>) {
      callStore(fn);
      lastRequest_ = clock_.now();
    } else {
      auto result = callStore(fn);
      lastRequest_ = clock_.now();
      return result;
    }
  } catch (const RendezvousBackendError&) {
    requestsCount_ = false;
    throw;
  }
}

}  // namespace ddprun::rendezvous
