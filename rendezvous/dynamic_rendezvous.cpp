#include "rendezvous/dynamic_rendezvous.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <thread>

namespace ddprun::rendezvous {
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

int64_t wallMs() {
  return std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string seconds(milliseconds ms) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", static_cast<double>(ms.count()) / 1000.0);
  return text;
}

void throwIfCancelled(const std::atomic<bool>& cancel) {
  if (cancel) throw RendezvousCancelled("rendezvous cancelled: ddprun is stopping");
}

}  // namespace

DynamicRendezvous::DynamicRendezvous(std::unique_ptr<RendezvousBackend> backend, DynamicRendezvousSettings settings)
    : backend_(std::move(backend)), settings_(std::move(settings)) {}

std::string DynamicRendezvous::describe() const {
  return "rendezvous '" + settings_.runId + "' on the " + backend_->describe();
}

DynamicRendezvous::Synced DynamicRendezvous::sync() {
  auto raw = backend_->getState();
  Synced synced;
  synced.token = raw.token;
  synced.exists = raw.value.has_value();
  if (raw.value) synced.state = decodeState(*raw.value);
  return synced;
}

bool DynamicRendezvous::tryWrite(RendezvousState state, const std::string& token) {
  state.writes += 1;
  return backend_->setState(encodeState(state), token).second;
}

template <typename Change>
void DynamicRendezvous::update(Change change) {
  while (true) {
    Synced synced = sync();
    if (!change(synced.state)) return;
    if (tryWrite(synced.state, synced.token)) return;
  }
}

void DynamicRendezvous::keepAliveIfDue() {
  if (self_.id.empty()) return;
  const auto now = Clock::now();
  if (now - lastKeepAlive_ < settings_.liveness.interval) return;
  backend_->keepAlive(self_.id);
  lastKeepAlive_ = now;
}

bool DynamicRendezvous::dropDeadNodes(Synced& synced) {
  std::vector<std::string> ids;
  for (const auto& [id, node] : synced.state.participants) ids.push_back(id);
  for (const auto& [id, node] : synced.state.waitList) ids.push_back(id);
  if (ids.empty()) return false;
  const auto dead = backend_->deadNodes(ids);
  if (dead.empty()) return false;
  RendezvousState cleaned = synced.state;
  if (!removeDeadNodes(cleaned, dead, settings_.limits)) return false;
  for (const auto& id : dead) spdlog::warn("rendezvous: node {} stopped heartbeating; removing it", id);
  tryWrite(cleaned, synced.token);  // on a conflict someone else wrote; the caller re-reads either way
  return true;
}

void DynamicRendezvous::leaveRound() {
  update([this](RendezvousState& state) {
    const bool inRound = state.participants.count(self_.id) > 0;
    const bool waiting = state.waitList.count(self_.id) > 0;
    if (!inRound && !waiting) return false;
    removeParticipant(state, self_.id, settings_.limits);
    state.waitList.erase(self_.id);
    return true;
  });
}

milliseconds DynamicRendezvous::pollDelay(const RendezvousState& state) const {
  // Change notifications wake us at once; the cap paces liveness checks and deadline checks.
  milliseconds delay = std::min(milliseconds(1000), settings_.liveness.interval);
  if (!state.complete && state.deadlineMs) {
    delay = std::min(delay, milliseconds(std::max<int64_t>(1, *state.deadlineMs - wallMs() + 1)));
  }
  return delay;
}

RoundAssignment DynamicRendezvous::next(const NodeDescriptor& self, const std::atomic<bool>& cancel) {
  if (!self_.id.empty() && self_.id != self.id) leaveRound();
  self_ = self;
  if (joinedRound_) leaveRound();  // _RendezvousExitOp: leave the previous round before joining the next
  joinedRound_.reset();
  lastKeepAlive_ = {};
  const auto deadline = Clock::now() + settings_.joinTimeout;
  const auto started = Clock::now();
  while (true) {
    throwIfCancelled(cancel);
    keepAliveIfDue();
    Synced synced = sync();
    if (dropDeadNodes(synced)) continue;
    RendezvousState& state = synced.state;
    // A participant of a complete round takes its place even when a faster node has finished meanwhile
    // and closed the rendezvous: the round is its job too.
    if (state.closed && !(state.complete && state.participants.count(self.id))) {
      throw RendezvousClosedError("the rendezvous '" + settings_.runId +
                                  "' is closed: the job already finished on another node (use a new --rdzv-id)");
    }
    if (Clock::now() > deadline) {
      leaveRound();
      throw RendezvousTimeoutError("rendezvous '" + settings_.runId + "' did not complete within join_timeout (" +
                                   seconds(settings_.joinTimeout) + "): " +
                                   std::to_string(state.participants.size()) + " node(s) joined, at least " +
                                   std::to_string(settings_.limits.minNodes) + " needed");
    }
    const int64_t now = wallMs();
    const JoinAction action = nextJoinAction(state, self.id, settings_.limits, now);
    if (action == JoinAction::kFinish) {
      RoundAssignment assignment = assignmentOf(state, self.id);
      joinedRound_ = state.round;
      roundMembers_.clear();
      for (const auto& [id, node] : state.participants) roundMembers_.insert(id);
      spdlog::info("rendezvous round {} complete in {:.0f} ms: {} node(s), world size {}, this node is group rank {}",
                   state.round, std::chrono::duration<double, std::milli>(Clock::now() - started).count(),
                   assignment.groupWorldSize, assignment.worldSize, assignment.groupRank);
      return assignment;
    }
    if (action == JoinAction::kWait) {
      backend_->waitForChange(synced.token, pollDelay(state));
      continue;
    }
    if (action == JoinAction::kAddToParticipants) {
      addParticipant(state, self.id, self, settings_.limits, now);
    } else if (action == JoinAction::kAddToWaitList) {
      state.waitList[self.id] = NodeRecord{self.addr, self.nproc, self.storeAddr, self.storePort, -1};
      spdlog::info("rendezvous round {} is running with {} node(s); waiting for the next round", state.round,
                   state.participants.size());
    } else {
      markComplete(state);
    }
    tryWrite(state, synced.token);  // a conflict just means: re-read and decide again
  }
}

void DynamicRendezvous::noteBackendFailure(const RendezvousBackendError& e) {
  lastBackendError_ = e.what();
  if (Clock::now() - lastContact_ >= settings_.liveness.expiry()) {
    throw RendezvousBackendError("lost the rendezvous backend for " + seconds(settings_.liveness.expiry()) +
                                 " (keep_alive_interval x keep_alive_max_attempt): " + lastBackendError_);
  }
  if (!backendUnreachable_) {
    spdlog::warn("rendezvous backend unreachable; retrying for up to {}: {}", seconds(settings_.liveness.expiry()),
                 lastBackendError_);
  }
  backendUnreachable_ = true;
}

Membership DynamicRendezvous::check() {
  try {
    keepAliveIfDue();
    Synced synced = sync();
    if (dropDeadNodes(synced)) synced = sync();
    lastContact_ = Clock::now();
    if (backendUnreachable_) spdlog::info("rendezvous backend reachable again");
    backendUnreachable_ = false;
    const RendezvousState& state = synced.state;
    if (!joinedRound_ || state.round != *joinedRound_ || !state.participants.count(self_.id)) {
      return Membership::kNodeLost;
    }
    for (const auto& id : roundMembers_) {
      if (!state.participants.count(id) && !state.finished.count(id)) {
        spdlog::warn("rendezvous: node {} left round {}", id, state.round);
        return Membership::kNodeLost;
      }
    }
    if (!state.closed && !state.waitList.empty() &&
        static_cast<int>(state.participants.size()) < settings_.limits.maxNodes) {
      spdlog::info("rendezvous: {} node(s) waiting to join; starting a new round", state.waitList.size());
      return Membership::kNodesWaiting;
    }
  } catch (const RendezvousBackendError& e) {
    noteBackendFailure(e);
  }
  return Membership::kStable;
}

void DynamicRendezvous::finish(bool succeeded, const std::atomic<bool>& cancel) {
  if (self_.id.empty()) return;
  try {
    update([&](RendezvousState& state) {
      const bool member = state.participants.count(self_.id) > 0;
      if (state.finished.count(self_.id) && (state.closed || !succeeded)) return false;
      if (member) state.finished.insert(self_.id);
      if (succeeded) state.closed = true;  // set_closed(): late joiners fail fast instead of waiting
      return member || succeeded;
    });
    if (settings_.hostsStore) {
      // Exit barrier: the other nodes still use the store this node serves.
      const auto deadline = Clock::now() + settings_.closeTimeout;
      while (Clock::now() < deadline && !cancel) {
        keepAliveIfDue();
        Synced synced = sync();
        dropDeadNodes(synced);
        const auto& state = synced.state;
        const bool allDone = std::all_of(state.participants.begin(), state.participants.end(),
                                         [&](const auto& p) { return state.finished.count(p.first) > 0; });
        if (allDone || state.round != joinedRound_.value_or(state.round)) break;
        backend_->waitForChange(synced.token, pollDelay(state));
      }
    }
  } catch (const RendezvousBackendError& e) {
    spdlog::warn("could not record the end of this node in the rendezvous: {}", e.what());
  }
  backend_->retire(self_.id);
}

}  // namespace ddprun::rendezvous
