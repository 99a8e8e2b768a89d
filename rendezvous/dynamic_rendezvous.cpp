#include "rendezvous/dynamic_rendezvous.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace ddprun::rendezvous {
using std::chrono::milliseconds;

namespace {

std::string seconds(milliseconds ms) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", static_cast<double>(ms.count()) / 1000.0);
  return text;
}

void throwIfCancelled(const std::atomic<bool>& cancel) {
  if (cancel) throw RendezvousCancelled("rendezvous cancelled: ddprun is stopping");
}

/// Pause before retrying an unreachable backend.
constexpr milliseconds kBackendRetry(200);

}  // namespace

DynamicRendezvous::DynamicRendezvous(std::unique_ptr<RendezvousBackend> backend, DynamicRendezvousSettings settings)
    : backend_(std::move(backend)),
      settings_(std::move(settings)),
      clock_(*settings_.clock),
      lastContact_(clock_.now()) {}

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

void DynamicRendezvous::execute(const Operation& op, const Deadline& deadline, const std::atomic<bool>* cancel,
                                OnBackendError onError) {
  while (true) {
    if (cancel != nullptr) throwIfCancelled(*cancel);
    try {
      keepAliveIfDue();
      Synced synced = sync();
      if (dropDeadNodes(synced)) continue;
      noteBackendContact();
      const Step step = op(synced.state, deadline);
      if (step == Step::kDone) return;
      if (step == Step::kWait) {
        // Change notifications wake us at once; the poll delay paces liveness and deadline checks.
        backend_->waitForChange(synced.token,
                                std::max(milliseconds(1), std::min(pollDelay(synced.state), deadline.remaining())));
        continue;
      }
      tryWrite(synced.state, synced.token);  // a conflict just means: re-read and decide again
    } catch (const RendezvousBackendError& e) {
      if (onError == OnBackendError::kThrow) throw;
      waitForBackend(e, deadline);
    }
  }
}

void DynamicRendezvous::keepAliveIfDue() {
  if (self_.id.empty()) return;
  const auto now = clock_.now();
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
  for (const auto& id : dead) {
    // A finished node stops heartbeating on purpose and stays (removeDeadNodes): only the others are news.
    if (!synced.state.finished.count(id)) spdlog::warn("rendezvous: node {} stopped heartbeating; removing it", id);
  }
  tryWrite(cleaned, synced.token);  // on a conflict someone else wrote; the caller re-reads either way
  return true;
}

DynamicRendezvous::Step DynamicRendezvous::leaveOp(RendezvousState& state) const {
  const bool inRound = state.participants.count(self_.id) > 0;
  const bool waiting = state.waitList.count(self_.id) > 0;
  if (!inRound && !waiting) return Step::kDone;
  removeParticipant(state, self_.id, settings_.limits);
  state.waitList.erase(self_.id);
  return Step::kWrite;
}

void DynamicRendezvous::leaveRound() {
  // Never waits: only write conflicts repeat it, so the deadline is only a formality.
  execute([this](RendezvousState& state, const Deadline&) { return leaveOp(state); },
          Deadline(clock_, settings_.closeTimeout), nullptr, OnBackendError::kThrow);
}

milliseconds DynamicRendezvous::pollDelay(const RendezvousState& state) const {
  // Change notifications wake us at once; the cap paces liveness checks and deadline checks.
  milliseconds delay = std::min(milliseconds(1000), settings_.liveness.interval);
  if (!state.complete && state.deadlineMs) {
    delay = std::min(delay, milliseconds(std::max<int64_t>(1, *state.deadlineMs - clock_.wallMs() + 1)));
  }
  return delay;
}

RoundAssignment DynamicRendezvous::next(const NodeDescriptor& self, const std::atomic<bool>& cancel) {
  // One deadline for the whole call: leaving the previous round (_RendezvousExitOp) and joining the next
  // share join_timeout, as next_rendezvous does in torch. An unreachable backend while leaving gets the
  // same patience (and the same "lost" verdict) as anywhere else.
  const Deadline deadline(clock_, settings_.joinTimeout);
  if (!self_.id.empty() && (joinedRound_ || self_.id != self.id)) {
    execute([this](RendezvousState& state, const Deadline&) { return leaveOp(state); }, deadline, &cancel,
            OnBackendError::kRetry);
  }
  self_ = self;
  joinedRound_.reset();
  lastKeepAlive_ = {};
  try {
    return join(deadline, cancel);
  } catch (const RendezvousCancelled&) {
    // A node that stops while joining must not stay behind as a participant the others wait for.
    try {
      leaveRound();
    } catch (const std::exception&) {
    }
    throw;
  }
}

void DynamicRendezvous::waitForBackend(const RendezvousBackendError& e, const Deadline& deadline) {
  if (reachedBackend_) {
    noteBackendFailure(e);  // lost mid-job: the same rule as check()
  } else {
    // Not reached yet: it may simply not be up yet (the host node starts later); keep trying until
    // join_timeout, as for the first connection.
    if (deadline.expired()) {
      throw RendezvousBackendError("could not reach the rendezvous backend within join_timeout (" +
                                   seconds(settings_.joinTimeout) + "): " + e.what());
    }
    if (!backendUnreachable_ || clock_.now() >= nextWaitLog_) {
      spdlog::info("waiting for the rendezvous backend (until join_timeout): {}", e.what());
      nextWaitLog_ = clock_.now() + std::chrono::seconds(10);
    }
    backendUnreachable_ = true;
  }
  clock_.sleepFor(kBackendRetry);
}

void DynamicRendezvous::logProgress(const RendezvousState& state, Clock::TimePoint& nextLog) {
  if (clock_.now() < nextLog) return;
  nextLog = clock_.now() + std::chrono::seconds(10);
  if (state.complete && !state.participants.count(self_.id)) {
    spdlog::info("rendezvous: round {} runs with {} node(s); waiting for it to end to join the next one", state.round,
                 state.participants.size());
  } else {
    spdlog::info("rendezvous round {}: {} node(s) joined, waiting for {}..{}", state.round, state.participants.size(),
                 settings_.limits.minNodes, settings_.limits.maxNodes);
  }
}

RoundAssignment DynamicRendezvous::join(const Deadline& deadline, const std::atomic<bool>& cancel) {
  const NodeDescriptor& self = self_;
  const auto started = clock_.now();
  auto nextLog = clock_.now() + std::chrono::seconds(5);
  std::optional<RoundAssignment> assignment;
  const Operation joinOp = [&](RendezvousState& state, const Deadline& until) {
    // A participant of a complete round takes its place even when a faster node has finished meanwhile
    // and closed the rendezvous: the round is its job too.
    if (state.closed && !(state.complete && state.participants.count(self.id))) {
      throw RendezvousClosedError("the rendezvous '" + settings_.runId +
                                  "' is closed: another node ended the job (it finished, or failed with no "
                                  "restarts left); a new job needs a new --rdzv-id");
    }
    if (until.expired()) {
      leaveRound();
      const bool waitingForRound = state.complete && !state.participants.count(self.id);
      throw RendezvousTimeoutError("rendezvous '" + settings_.runId + "' did not complete within join_timeout (" +
                                   seconds(settings_.joinTimeout) + "): " +
                                   (waitingForRound
                                        ? "round " + std::to_string(state.round) + " kept running with " +
                                              std::to_string(state.participants.size()) + " node(s) and never made room"
                                        : std::to_string(state.participants.size()) + " node(s) joined, at least " +
                                              std::to_string(settings_.limits.minNodes) + " needed"));
    }
    logProgress(state, nextLog);
    const int64_t now = clock_.wallMs();
    switch (nextJoinAction(state, self.id, settings_.limits, now)) {
      case JoinAction::kFinish:
        assignment = assignmentOf(state, self.id);
        joinedRound_ = state.round;
        roundMembers_.clear();
        for (const auto& [id, node] : state.participants) roundMembers_.insert(id);
        return Step::kDone;
      case JoinAction::kWait: return Step::kWait;
      case JoinAction::kAddToParticipants:
        addParticipant(state, self.id, self, settings_.limits, now);
        return Step::kWrite;
      case JoinAction::kAddToWaitList:
        state.waitList[self.id] = NodeRecord{self.addr, self.nproc, self.storeAddr, self.storePort, -1};
        spdlog::info("rendezvous round {} is running with {} node(s); waiting for the next round", state.round,
                     state.participants.size());
        return Step::kWrite;
      case JoinAction::kMarkComplete: markComplete(state); return Step::kWrite;
    }
    return Step::kWait;
  };
  execute(joinOp, deadline, &cancel, OnBackendError::kRetry);
  spdlog::info("rendezvous round {} complete in {:.0f} ms: {} node(s), world size {}, this node is group rank {}",
               *joinedRound_, std::chrono::duration<double, std::milli>(clock_.now() - started).count(),
               assignment->groupWorldSize, assignment->worldSize, assignment->groupRank);
  return *assignment;
}

void DynamicRendezvous::noteBackendFailure(const RendezvousBackendError& e) {
  if (clock_.now() - lastContact_ >= settings_.liveness.expiry()) {
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
  lastContact_ = clock_.now();
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
      // torchrun's shutdown(): this node is finished and the job is over for every node.
      const Operation closeOp = [this](RendezvousState& state, const Deadline&) {
        if (state.closed && (state.finished.count(self_.id) || !state.participants.count(self_.id))) {
          return Step::kDone;
        }
        if (state.participants.count(self_.id)) state.finished.insert(self_.id);
        state.closed = true;
        return Step::kWrite;
      };
      execute(closeOp, Deadline(clock_, settings_.closeTimeout), nullptr, OnBackendError::kThrow);
      if (settings_.hostsStore) waitForOthersToFinish(cancel);
    }
  } catch (const RendezvousBackendError& e) {
    spdlog::warn("could not record the end of this node in the rendezvous: {}", e.what());
  }
  backend_->retire(self_.id);
}

void DynamicRendezvous::waitForOthersToFinish(const std::atomic<bool>& cancel) {
  // Exit barrier: the other nodes still use the store this node serves.
  bool announced = false;
  size_t running = 0;
  const Operation barrierOp = [&](RendezvousState& state, const Deadline& deadline) {
    running = static_cast<size_t>(std::count_if(state.participants.begin(), state.participants.end(),
                                                [&](const auto& p) { return !state.finished.count(p.first); }));
    if (running == 0 || state.round != joinedRound_.value_or(state.round)) return Step::kDone;
    if (deadline.expired() || cancel) return Step::kDone;
    if (!announced) {
      spdlog::info("this node serves the rendezvous store: waiting up to {} (close_timeout) for {} node(s) to finish",
                   seconds(settings_.closeTimeout), running);
      announced = true;
    }
    return Step::kWait;
  };
  execute(barrierOp, Deadline(clock_, settings_.closeTimeout), nullptr, OnBackendError::kThrow);
  if (running > 0 && !cancel) {
    spdlog::warn("close_timeout passed with {} node(s) still running; their rendezvous store goes away now", running);
  }
}

}  // namespace ddprun::rendezvous
