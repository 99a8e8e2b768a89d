#pragma once
// A node's presence that the backend itself ends when the node's process dies: the etcd-v3 counterpart of the
// closed-connection mark on ddprun's store (node_connections.hpp). The node writes one key under a short lease
// and keeps the lease alive; when its process dies nobody renews it, etcd deletes the key when the lease's TTL
// passes, and the node that watches it (TicketRendezvous::check) ends the round at its next check instead of
// waiting out the heartbeat timeout. Heartbeats stay as they are.
#include <chrono>
#include <string>

namespace ddprun::rendezvous {

class NodeLease {
 public:
  virtual ~NodeLease() = default;
  /// Writes `key` (a full backend key) under the lease and keeps it alive from now on, until this object is
  /// destroyed (which deletes it). A second call moves the lease to the new key. Throws RendezvousBackendError
  /// when the backend cannot be reached.
  virtual void hold(const std::string& key) = 0;
  /// How long after the holder's death its key is gone, at most (the TTL and the backend's expiry checks).
  virtual std::chrono::milliseconds lapsesWithin() const = 0;
};

}  // namespace ddprun::rendezvous
