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
  // _RendezvousExitOp: leave the previous round before joining the next; an unreachable backend here gets
  // the same patience (and the same "lost" verdict) as anywhere else.
  const auto deadline = Clock::now() + settings_.joinTimeout;
  while (!self_.id.empty() && (joinedRound_ || self_.id != self.id)) {
    throwIfCancelled(cancel);
    try {
      leaveRound();
      break;
    } catch (const RendezvousBackendError& e) {
      waitForBackend(e, deadline);
    }
  }
  self_ = self;
  joinedRound_.reset();
  lastKeepAlive_ = {};
  try {
    return join(cancel);
  } catch (const RendezvousCancelled&) {
    // A node that stops while joining must not stay behind as a participant the others wait for.
    try {
      leaveRound();
    } catch (const std::exception&) {
    }
    throw;
  }
}

void DynamicRendezvous::waitForBackend(const RendezvousBackendError& e, Clock::time_point joinDeadline) {
  if (reachedBackend_) {
    noteBackendFailure(e);  // lost mid-job: the same rule as check()
  } else {
    // Not reached yet: it may simply not be up yet (the host node starts later); keep trying until
    // join_timeout, as for the first connection.
    if (Clock::now() >= joinDeadline) {
      throw RendezvousBackendError("could not reach the rendezvous backend within join_timeout (" +
                                   seconds(settings_.joinTimeout) + "): " + e.what());
    }
    if (!backendUnreachable_ || Clock::now() >= nextWaitLog_) {
      spdlog::info("waiting for the rendezvous backend (until join_timeout): {}", e.what());
      nextWaitLog_ = Clock::now() + std::chrono::seconds(10);
    }
    backendUnreachable_ = true;
  }
  std::this_thread::sleep_for(milliseconds(200));
}

void DynamicRendezvous::logProgress(const RendezvousState& state, Clock::time_point& nextLog) {
  if (Clock::now() < nextLog) return;
  nextLog = Clock::now() + std::chrono::seconds(10);
  if (state.complete && !state.participants.count(self_.id)) {
    spdlog::info("rendezvous: round {} runs with {} node(s); waiting for it to end to join the next one",
                 state.round, state.participants.size());
  } else {
    spdlog::info("rendezvous round {}: {} node(s) joined, waiting for {}..{}", state.round,
                 state.participants.size(), settings_.limits.minNodes, settings_.limits.maxNodes);
  }
}

RoundAssignment DynamicRendezvous::join(const std::atomic<bool>& cancel) {
  const NodeDescriptor& self = self_;
  const auto deadline = Clock::now() + settings_.joinTimeout;
  const auto started = Clock::now();
  auto nextLog = Clock::now() + std::chrono::seconds(5);
  while (true) {
    throwIfCancelled(cancel);
    Synced synced;
    try {
      keepAliveIfDue();
      synced = sync();
      if (dropDeadNodes(synced)) continue;
    } catch (const RendezvousBackendError& e) {
      waitForBackend(e, deadline);
      continue;
    }
    noteBackendContact();
    RendezvousState& state = synced.state;
    // A participant of a complete round takes its place even when a faster node has finished meanwhile
    // and closed the rendezvous: the round is its job too.
    if (state.closed && !(state.complete && state.participants.count(self.id))) {
      throw RendezvousClosedError("the rendezvous '" + settings_.runId +
                                  "' is closed: another node ended the job (it finished, or failed with no "
                                  "restarts left); a new job needs a new --rdzv-id");
    }
    if (Clock::now() > deadline) {
      leaveRound();
      const bool waitingForRound = state.complete && !state.participants.count(self.id);
      throw RendezvousTimeoutError(
          "rendezvous '" + settings_.runId + "' did not complete within join_timeout (" +
          seconds(settings_.joinTimeout) + "): " +
          (waitingForRound ? "round " + std::to_string(state.round) + " kept running with " +
                                 std::to_string(state.participants.size()) + " node(s) and never made room"
                           : std::to_string(state.participants.size()) + " node(s) joined, at least " +
                                 std::to_string(settings_.limits.minNodes) + " needed"));
    }
    logProgress(state, nextLog);
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
    try {
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
    } catch (const RendezvousBackendError& e) {
      waitForBackend(e, deadline);
    }
  }
}

void DynamicRendezvous::noteBackendFailure(const RendezvousBackendError& e) {
  if (Clock::now() - lastContact_ >= settings_.liveness.expiry()) {
    throw RendezvousBackendError("lost the rendezvous backend for " + seconds(settings_.liveness.expiry()) +
                                 " (keep_alive_interval x keep_alive_max_attempt): " + e.what());
  }
  if (!backendUnreachable_) {
    spdlog::warn("rendezvous backend unreachable; retrying for up to {}: {}", seconds(settings_.liveness.expiry()),
                 e.what());
  }
  backendUnreachable_ = true;
}

void DynamicRendezvous::noteBackendContact() {
  if (backendUnreachable_ && reachedBackend_) spdlog::info("rendezvous backend reachable again");
  reachedBackend_ = true;
  backendUnreachable_ = false;
  lastContact_ = Clock::now();
}

Membership DynamicRendezvous::check() {
  try {
    keepAliveIfDue();
    Synced synced = sync();
    if (dropDeadNodes(synced)) synced = sync();
    noteBackendContact();
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

void DynamicRendezvous::keepAlive() noexcept {
  try {
    keepAliveIfDue();
  } catch (const std::exception&) {
    // check() counts and reports an unreachable backend; a heartbeat that fails is simply retried.
  }
}

void DynamicRendezvous::finish(NodeOutcome outcome, const std::atomic<bool>& cancel) {
  if (self_.id.empty()) return;
  try {
    if (outcome == NodeOutcome::kStopped) {
      leaveRound();
    } else {
      update([&](RendezvousState& state) {
        if (state.closed && (state.finished.count(self_.id) || !state.participants.count(self_.id))) return false;
        if (state.participants.count(self_.id)) state.finished.insert(self_.id);
        state.closed = true;  // torchrun's shutdown(): the job is over for every node
        return true;
      });
      if (settings_.hostsStore) waitForOthersToFinish(cancel);
    }
  } catch (const RendezvousBackendError& e) {
    spdlog::warn("could not record the end of this node in the rendezvous: {}", e.what());
  }
  backend_->retire(self_.id);
}

void DynamicRendezvous::waitForOthersToFinish(const std::atomic<bool>& cancel) {
  // Exit barrier: the other nodes still use the store this node serves.
  const auto deadline = Clock::now() + settings_.closeTimeout;
  bool announced = false;
  size_t running = 0;
  while (Clock::now() < deadline && !cancel) {
    keepAliveIfDue();
    Synced synced = sync();
    dropDeadNodes(synced);
    const auto& state = synced.state;
    running = static_cast<size_t>(std::count_if(state.participants.begin(), state.participants.end(),
                                                [&](const auto& p) { return !state.finished.count(p.first); }));
    if (running == 0 || state.round != joinedRound_.value_or(state.round)) return;
    if (!announced) {
      spdlog::info("this node serves the rendezvous store: waiting up to {} (close_timeout) for {} node(s) to finish",
                   seconds(settings_.closeTimeout), running);
      announced = true;
    }
    backend_->waitForChange(synced.token, pollDelay(state));
  }
  if (running > 0 && !cancel) {
    spdlog::warn("close_timeout passed with {} node(s) still running; their rendezvous store goes away now", running);
  }
}

}  // namespace ddprun::rendezvous
