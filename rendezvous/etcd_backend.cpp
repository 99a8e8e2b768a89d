#include "rendezvous/etcd_backend.hpp"

#include <algorithm>
#include <set>

namespace ddprun::rendezvous {
namespace {

RendezvousBackend::State toState(const std::optional<EtcdKeyValue>& kv) {
  if (!kv) return {};
  return {kv->value, std::to_string(kv->modRevision)};
}

}  // namespace

EtcdRendezvousBackend::EtcdRendezvousBackend(std::string host, uint16_t port, std::string runId,
                                             LivenessSettings liveness, std::chrono::milliseconds readTimeout)
    : client_(std::move(host), port, readTimeout), prefix_("/ddprun/rdzv/" + runId + "/"), liveness_(liveness) {}

std::string EtcdRendezvousBackend::describe() const { return client_.describe(); }

int64_t EtcdRendezvousBackend::revisionOf(const std::string& token) const {
  try {
    size_t used = 0;
    const int64_t revision = std::stoll(token, &used);
    if (used == token.size() && revision > 0) return revision;
  } catch (const std::logic_error&) {
  }
  throw RendezvousBackendError(describe() + ": \"" + token + "\" is not a state token of this backend");
}

RendezvousBackend::State EtcdRendezvousBackend::getState() { return toState(client_.get(stateKey()).kv); }

std::pair<RendezvousBackend::State, bool> EtcdRendezvousBackend::setState(const std::string& value,
                                                                          const std::string& token) {
  const std::optional<int64_t> expected = token.empty() ? std::nullopt : std::optional(revisionOf(token));
  const auto swap = client_.compareAndSwap(stateKey(), expected, value);
  return {toState(swap.current), swap.swapped};
}

void EtcdRendezvousBackend::waitForChange(const std::string& token, std::chrono::milliseconds timeout) {
  int64_t fromRevision = 0;
  if (token.empty()) {
    // Watching from the revision of this read misses no creation that happens after it.
    const auto range = client_.get(stateKey());
    if (range.kv) return;  // created since the caller's read
    fromRevision = range.revision + 1;
  } else {
    fromRevision = revisionOf(token) + 1;
  }
  client_.watch(stateKey(), fromRevision, timeout);
}

std::chrono::seconds EtcdRendezvousBackend::leaseTtl() const {
  const auto expiry = liveness_.expiry();
  const auto seconds = std::chrono::ceil<std::chrono::seconds>(expiry);
  return std::max(seconds, std::chrono::seconds(1));
}

void EtcdRendezvousBackend::announce(const std::string& nodeId) {
  const int64_t lease = client_.grantLease(leaseTtl());
  client_.put(nodesPrefix() + nodeId, "", lease);
  // Remembered only once the key exists: renewing a lease without a key would never make the node alive.
  leases_[nodeId] = lease;
}

void EtcdRendezvousBackend::keepAlive(const std::string& nodeId) {
  const auto it = leases_.find(nodeId);
  if (it == leases_.end() || client_.keepAliveLease(it->second) <= 0) announce(nodeId);
}

std::vector<std::string> EtcdRendezvousBackend::deadNodes(const std::vector<std::string>& nodeIds) {
  const std::string prefix = nodesPrefix();
  std::set<std::string> alive;
  for (const auto& key : client_.keysWithPrefix(prefix)) alive.insert(key.substr(prefix.size()));
  std::vector<std::string> dead;
  for (const auto& id : nodeIds) {
    if (alive.count(id) == 0) dead.push_back(id);
  }
  return dead;
}

void EtcdRendezvousBackend::retire(const std::string& nodeId) noexcept {
  try {
    const auto it = leases_.find(nodeId);
    if (it == leases_.end()) {
      client_.remove(nodesPrefix() + nodeId);
      return;
    }
    const int64_t lease = it->second;
    leases_.erase(it);
    client_.revokeLease(lease);
  } catch (...) {
    // A clean exit must not fail on an unreachable etcd: the lease expires by itself.
  }
}

}  // namespace ddprun::rendezvous
