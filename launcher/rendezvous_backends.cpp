#include "launcher/rendezvous_backends.hpp"

#include "common/error.hpp"

namespace ddprun::launcher {
namespace {

constexpr RendezvousBackendInfo kBackends[] = {
    {"static", RendezvousBackendKind::kStatic, 29500, false},
    {"c10d", RendezvousBackendKind::kC10d, 29400, true},
    {"etcd-v3", RendezvousBackendKind::kEtcdV3, 2379, true},
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

}  // namespace ddprun::launcher
