#pragma once
// The rendezvous backend on etcd v3 (through its JSON gRPC-gateway, see etcd_client.hpp). Layout under
// /ddprun/rdzv/<runId>/:
//   state          the rendezvous state; its token is the key's mod_revision (decimal), "" when absent
//   nodes/<nodeId> one key per live node, attached to a lease of TTL ceil(LivenessSettings::expiry()),
//                  so etcd itself deletes the key of a node that stops renewing
// The state changes only through a txn that compares the token, as PyTorch's etcd-v2 backend does with
// prevValue (torch/distributed/elastic/rendezvous/etcd_rendezvous_backend.py).
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "rendezvous/etcd_client.hpp"
#include "rendezvous/rendezvous_backend.hpp"

namespace ddprun::rendezvous {

/// RendezvousBackend on an etcd v3 server (etcd >= 3.4). Errors are RendezvousBackendError naming
/// "etcd-v3 at host:port" and the operation.
class EtcdRendezvousBackend : public RendezvousBackend {
 public:
  /// Talks to etcd at host:port; `runId` separates rendezvous sharing one etcd; `readTimeout` bounds
  /// every call to etcd (waitForChange additionally waits up to its own timeout). Connects lazily.
  EtcdRendezvousBackend(std::string host, uint16_t port, std::string runId, LivenessSettings liveness,
                        std::chrono::milliseconds readTimeout);
  /// Does not retire the nodes it kept alive: their leases simply expire.
  ~EtcdRendezvousBackend() override = default;

  std::string describe() const override;
  State getState() override;
  std::pair<State, bool> setState(const std::string& value, const std::string& token) override;
  /// Watches the state key from the revision after `token` (a change already made since returns at once).
  void waitForChange(const std::string& token, std::chrono::milliseconds timeout) override;
  /// First call for a node: grants its lease and writes its key; later calls renew the lease, and start
  /// over when etcd reports the lease gone (expired while this process was stalled).
  void keepAlive(const std::string& nodeId) override;
  /// One prefix read of nodes/: the ids whose key is absent.
  std::vector<std::string> deadNodes(const std::vector<std::string>& nodeIds) override;
  /// Revokes the node's lease (deleting its key at once); without one, deletes the key. Never throws.
  void retire(const std::string& nodeId) noexcept override;

 private:
  std::string stateKey() const { return prefix_ + "state"; }
  std::string nodesPrefix() const { return prefix_ + "nodes/"; }
  std::chrono::seconds leaseTtl() const;
  void announce(const std::string& nodeId);
  int64_t revisionOf(const std::string& token) const;

  EtcdClient client_;
  std::string prefix_;  // "/ddprun/rdzv/<runId>/"
  LivenessSettings liveness_;
  std::map<std::string, int64_t> leases_;  // nodeId -> lease id, for the nodes this instance keeps alive
};

}  // namespace ddprun::rendezvous
