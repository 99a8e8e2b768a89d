#include "rendezvous/registry.hpp"

#include "common/error.hpp"
#include "rendezvous/etcd_node_lease.hpp"
#include "rendezvous/etcd_store.hpp"
#include "rendezvous/ticket_rendezvous.hpp"
#include "store/store_client.hpp"

namespace ddprun::rendezvous {
namespace {

/// The c10d backend: ddprun's TCPStore at the endpoint, a key per node (TicketRendezvous). Other nodes may
/// start before the store's host, so connecting keeps trying for the whole join_timeout.
std::unique_ptr<RendezvousHandler> makeC10d(const BackendParams& p, const DynamicRendezvousSettings& settings) {
  auto client = std::make_shared<store::StoreClient>(p.host, p.port, p.readTimeout, p.joinTimeout, p.cancel);
  return std::make_unique<TicketRendezvous>(std::move(client), settings);
}

/// etcd v3: the same ticket rendezvous, its keys in etcd (EtcdStore), each node's presence under a lease.
std::unique_ptr<RendezvousHandler> makeEtcdV3(const BackendParams& p, const DynamicRendezvousSettings& settings) {
  auto store = std::make_shared<EtcdStore>(p.host, p.port, p.readTimeout, p.cancel);
  auto lease = std::make_shared<EtcdNodeLease>(p.host, p.port, p.readTimeout);
  return std::make_unique<TicketRendezvous>(std::move(store), settings, std::move(lease));
}

const RendezvousBackendInfo kBackends[] = {
    // name      default port  dynamic  store at endpoint  factory
    {"static", 29500, false, false, nullptr},  // torchrun's static_tcp_rendezvous: node 0's agent serves the store
    {"c10d", 29400, true, true, makeC10d},     // ddprun's TCPStore, served by the node at the endpoint
    {"etcd-v3", 2379, true, false, makeEtcdV3},
};

}  // namespace

const RendezvousBackendInfo* findRendezvousBackend(const std::string& name) {
  for (const auto& backend : kBackends) {
    if (name == backend.name) return &backend;
  }
  if (name == "etcd" || name == "etcd-v2") {
    throw ConfigError("--rdzv-backend " + name + ": etcd's v2 API is not supported; use etcd-v3 (etcd >= 3.4)");
  }
  return nullptr;
}

std::string rendezvousBackendNames() {
  std::string names;
  const size_t n = sizeof kBackends / sizeof kBackends[0];
  for (size_t i = 0; i < n; ++i) {
    names += kBackends[i].name;
    if (i + 2 < n) names += ", ";
    if (i + 2 == n) names += " or ";
  }
  return names;
}

}  // namespace ddprun::rendezvous
