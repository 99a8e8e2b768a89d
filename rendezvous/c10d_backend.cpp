#include "rendezvous/c10d_backend.hpp"

namespace ddprun::rendezvous {

C10dRendezvousBackend::C10dRendezvousBackend(std::unique_ptr<StoreClient> client, const std::string& runId,
                                             LivenessSettings liveness)
    : client_(std::move(client)), prefix_("/ddprun.rdzv." + runId + "/"), liveness_(liveness) {}

RendezvousBackend::State C10dRendezvousBackend::getState() {
  State state;
  state.value = client_->get(prefix_ + "state");
  state.token = state.value.value_or("");  // the value is its own version token (states never repeat)
  return state;
}

std::pair<RendezvousBackend::State, bool> C10dRendezvousBackend::setState(const std::string& value,
                                                                         const std::string& token) {
  const std::string stored = client_->compareSet(prefix_ + "state", token, value);
  const bool written = stored == value;
  if (written) {
    const int64_t version = client_->add(prefix_ + "version", 1);
    client_->set(prefix_ + "changed/" + std::to_string(version), "");
  }
  State state;
  if (!stored.empty()) state.value = stored;
  state.token = stored;
  return {state, written};
}

void C10dRendezvousBackend::waitForChange(const std::string& token, std::chrono::milliseconds timeout) {
  // Version first, then the state: a write between the two shows up as a changed state, one after as
  // the next marker, so no change is missed.
  const int64_t version = client_->add(prefix_ + "version", 0);
  if (client_->get(prefix_ + "state").value_or("") != token) return;
  client_->wait({prefix_ + "changed/" + std::to_string(version + 1)}, timeout);
}

void C10dRendezvousBackend::keepAlive(const std::string& nodeId) { client_->add(prefix_ + "alive/" + nodeId, 1); }

std::vector<std::string> C10dRendezvousBackend::deadNodes(const std::vector<std::string>& nodeIds) {
  std::vector<std::string> keys;
  keys.reserve(nodeIds.size());
  for (const auto& id : nodeIds) keys.push_back(prefix_ + "alive/" + id);
  const auto counters = client_->multiGet(keys);
  const auto now = std::chrono::steady_clock::now();
  std::vector<std::string> dead;
  for (size_t i = 0; i < nodeIds.size(); ++i) {
    auto [it, first] = heartbeats_.try_emplace(nodeIds[i], Heartbeat{counters[i], now});
    if (!first && it->second.counter != counters[i]) it->second = Heartbeat{counters[i], now};
    if (now - it->second.changedAt >= liveness_.expiry()) dead.push_back(nodeIds[i]);
  }
  return dead;
}

void C10dRendezvousBackend::retire(const std::string&) noexcept {
  // Nothing to withdraw: the counter simply stops, and finished nodes are recorded in the state.
}

}  // namespace ddprun::rendezvous
