#pragma once
// The rendezvous backends ddprun knows, in one table (torch's rendezvous/registry.py): validation and the
// rendezvous session look a backend up here instead of comparing its name in many places.
#include <string>

namespace ddprun::launcher {

enum class RendezvousBackendKind {
  kStatic,  ///< fixed node ranks; node 0's agent serves the store (torchrun's static_tcp_rendezvous)
  kC10d,    ///< dynamic rounds on a TCPStore that the node at the endpoint serves
  kEtcdV3,  ///< dynamic rounds on an etcd v3 cluster
};

/// One backend's facts.
struct RendezvousBackendInfo {
  const char* name;            ///< as given to --rdzv-backend
  RendezvousBackendKind kind;
  int defaultPort;             ///< when --rdzv-endpoint has none
  bool dynamic;                ///< elastic rounds (MIN:MAX nodes) rather than fixed node ranks
};

/// The backend called `name`, or nullptr. Throws ConfigError for a name ddprun knows it does not support
/// (etcd's v2 API), saying what to use instead.
const RendezvousBackendInfo* findRendezvousBackend(const std::string& name);

/// "static, c10d or etcd-v3", for messages.
std::string rendezvousBackendNames();

}  // namespace ddprun::launcher
