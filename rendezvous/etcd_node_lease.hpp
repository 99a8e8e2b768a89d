#pragma once
// NodeLease on etcd v3: one lease of kTtl, renewed by a thread of its own every kTtl / 3 over its own client
// (the rendezvous thread may be blocked in a watch meanwhile). A lease that lapsed anyway (this process was
// paused, or etcd unreachable, for longer than the TTL) is granted again and the key written again: the others
// have seen this node as gone by then, which is what a vanished node is. Leases: etcd's api_reference_v3
// (LeaseGrant, LeaseKeepAlive, LeaseRevoke; a key put with a lease is deleted when the lease expires).
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "rendezvous/etcd_client.hpp"
#include "rendezvous/node_lease.hpp"

namespace ddprun::rendezvous {

class EtcdNodeLease : public NodeLease {
 public:
  /// The lease's TTL: a killed node's key is gone this long after its last renewal (etcd checks for expired
  /// leases every 500 ms). etcd's own minimum is about 2 s with its default election timeout.
  static constexpr std::chrono::seconds kTtl{3};

  /// Talks to etcd at host:port; every call is bounded by `timeout` (at most kTtl, so a renewal that hangs cannot
  /// outlive the lease it renews).
  EtcdNodeLease(std::string host, uint16_t port, std::chrono::milliseconds timeout);
  /// Stops renewing and revokes the lease (its key goes at once); bounded by the timeout.
  ~EtcdNodeLease() override;

  void hold(const std::string& key) override;
  /// kTtl, plus etcd's 0.5 s between looks for expired leases and 0.5 s for a busy machine.
  std::chrono::milliseconds lapsesWithin() const override { return kTtl + std::chrono::seconds(1); }

 private:
  void renewUntilStopped();
  /// Renews once; grants a new lease and writes the key again when the old one lapsed.
  void renewOnce();

  EtcdClient client_;  ///< used by the renewing thread only, once it runs
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::string key_;
  int64_t lease_ = 0;
  std::thread renewer_;
};

}  // namespace ddprun::rendezvous
