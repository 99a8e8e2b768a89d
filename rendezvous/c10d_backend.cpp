#include "rendezvous/c10d_backend.hpp"

#include "rendezvous/store_border.hpp"

namespace ddprun::rendezvous {

C10dRendezvousBackend::C10dRendezvousBackend(std::shared_ptr<store::Store> store, const std::string& runId,
                                             LivenessSettings liveness, Clock& clock)
    : store_("/ddprun.rdzv." + runId, std::move(store)), liveness_(liveness), clock_(clock) {}

RendezvousBackend::State C10dRendezvousBackend::getState() {
  State state;
  state.value = callStore([&] { return store_.get("state"); });
  state.token = state.value.value_or("");  // the value is its own version token (states never repeat)
  return state;
}

std::pair<RendezvousBackend::State, bool> C10dRendezvousBackend::setState(const std::string& value,
                                                                          const std::string& token) {
  const std::string stored = callStore([&] { return store_.compareSet("state", token, value); });
  const bool written = stored == value;
  if (written) {
    callStore([&] {
      const int64_t version = store_.add("version", 1);
      store_.set("changed/" + std::to_string(version), "");
    });
  }
  State state;
  if (!stored.empty()) state.value = stored;
  state.token = stored;
  return {state, written};
}

void C10dRendezvousBackend::waitForChange(const std::string& token, std::chrono::milliseconds timeout) {
  // Version first, then the state: a write between the two shows up as a changed state, one after as
  // the next marker, so no change is missed.
  callStore([&] {
    const int64_t version = store_.add("version", 0);
    if (store_.get("state").value_or("") != token) return;
    store_.wait({"changed/" + std::to_string(version + 1)}, timeout);
  });
}

void C10dRendezvousBackend::keepAlive(const std::string& nodeId) {
  callStore([&] { return store_.add("alive/" + nodeId, 1); });
}

std::vector<std::string> C10dRendezvousBackend::deadNodes(const std::vector<std::string>& nodeIds) {
  std::vector<std::string> keys;
  keys.reserve(nodeIds.size());
  for (const auto& id : nodeIds) keys.push_back("alive/" + id);
  const auto counters = callStore([&] { return store_.multiGet(keys); });
  const auto now = clock_.now();
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
