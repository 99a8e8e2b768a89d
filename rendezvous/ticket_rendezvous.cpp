#include "rendezvous/ticket_rendezvous.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/log_text.hpp"

namespace ddprun::rendezvous {
namespace keys = round_keys;
using std::chrono::milliseconds;

namespace {

void throwIfCancelled(const CancelFlag& cancel) {
  if (cancel) throw RendezvousCancelled("rendezvous cancelled: ddprun is stopping");
}

/// A decimal counter or number as the store holds it; 0 for a missing or unparsable value.
int64_t number(const std::string& value) {
  try {
    return value.empty() ? 0 : std::stoll(value);
  } catch (const std::exception&) {
    return 0;
  }
}

std::string roundName(int64_t r) { return "round " + std::to_string(r); }

/// The closer's node id in a claim or a closed round's size ("N <closer>").
std::string closerOf(const std::string& claim) { return claim.substr(claim.find(' ') + 1); }

/// "node '<id>'" for a node id read from the store (escaped: another node wrote it).
std::string quotedNode(const std::string& id) { return "node '" + printable(id, 80) + "'"; }

/// The key under the run's prefix, as a log line names it.
std::string keyName(const std::string& key) { return "'" + key + "'"; }

}  // namespace

TicketRendezvous::TicketRendezvous(std::shared_ptr<store::Store> store, DynamicRendezvousSettings settings,
                                   std::shared_ptr<NodeLease> lease)
    : store_(keys::prefix(settings.runId), std::move(store)),
      settings_(std::move(settings)),
      clock_(*settings_.clock),
      health_(clock_, settings_.liveness, settings_.joinTimeout),
      liveness_(store_, clock_, settings_.liveness, std::move(lease)) {}

std::string TicketRendezvous::describe() const {
  return "rendezvous '" + settings_.runId + "' on the " + store_.describe();
}

void TicketRendezvous::expectChange() {
  urgentUntil_ = clock_.now() + nodeLossSeenWithin();
  nextCheck_ = {};
}

milliseconds TicketRendezvous::checkDueIn() const {
  if (!joined_) return milliseconds(0);
  const auto now = clock_.now();
  return nextCheck_ > now ? std::chrono::ceil<milliseconds>(nextCheck_ - now) : milliseconds(0);
}

milliseconds TicketRendezvous::nodeLossSeenWithin() const {
  const auto lapses = liveness_.leaseLapsesWithin();
  if (!lapses) return RendezvousHandler::nodeLossSeenWithin();
  return *lapses + checkPace(settings_.limits.maxNodes);
}

milliseconds TicketRendezvous::checkPace(int nodes) const {
  return std::min(milliseconds(2) * nodes, settings_.liveness.interval / 2);
}

template <typename Call>
auto TicketRendezvous::call(Call&& fn) -> decltype(fn()) {
  return liveness_.call(std::forward<Call>(fn));
}

void TicketRendezvous::keepAlive() noexcept {
  try {
    liveness_.keepAliveIfDue();
  } catch (const std::exception&) {
    // check() counts and reports an unreachable backend; a heartbeat that fails is simply retried.
  }
}

milliseconds TicketRendezvous::pollDelay(const Deadline& deadline) const {
  // Keys wake waiters at once; the cap paces heartbeats and deadline checks (a cancellable store client
  // notices a stop within its WAIT). Each poll is a few round trips, so a thousand waiting nodes cost the store
  // a thousand of them every keep_alive_interval / 2, not every second.
  return std::max(milliseconds(1), std::min({settings_.liveness.interval / 2, deadline.remaining()}));
}

int64_t TicketRendezvous::currentRoundOfOpenJob() {
  // One request instead of three for the common case: a thousand nodes joining at once each pay every round trip
  // on a busy host, and so does the store's thread.
  const int64_t likely = likelyRound_;
  const auto v = call([&] { return store_.multiGet({keys::closed(), keys::roundHint(), keys::ended(likely)}); });
  if (!v[0].empty()) throw closedError();
  int64_t r = 0;  // no hint yet: round 0
  if (const auto hint = parseRound(v[1])) {
    r = *hint;
  } else if (!v[1].empty()) {
    r = likely;
    spdlog::error("rendezvous: key {} holds '{}', not a round number (0..{}); ignoring it", keyName(keys::roundHint()),
                  printable(v[1], 40), kMaxRound);
  }
  if (r == likely) {
    if (v[2].empty()) return r;
    ++r;
  }
  while (call([&] { return store_.get(keys::ended(r)); })) {
    if (++r > kMaxRound) throw RendezvousValueError("every round up to " + std::to_string(kMaxRound) + " has ended");
  }
  return r;
}

void TicketRendezvous::endRound(int64_t r, RoundEnd kind, const std::string& text) {
  call([&] {
    store_.compareSet(keys::ended(r), "", encodeRoundEnd(kind, text));
    store_.compareSet(keys::size(r), "", "ended");  // wakes the nodes still joining it
    store_.set(keys::roundHint(), std::to_string(r + 1));
  });
}

void TicketRendezvous::tryClose(int64_t r) {
  const int64_t taken = call([&] { return store_.add(keys::tickets(r), 0); });
  const int64_t n = std::min<int64_t>(taken, settings_.limits.maxNodes);
  const std::string mine = std::to_string(n) + " " + self_.id;  // unique, so exactly one node wins
  // The claim is its own key, and "size" (what every waiting node waits on) is written only after the assignments:
  // a node woken by it reads its assignment in the same request (one round trip after the wake instead of four,
  // which a thousand nodes woken at once pay on a busy host).
  if (call([&] { return store_.compareSet(keys::closing(r), "", mine); }) != mine) return;
  assignRanksOf(r, n, mine);
}

void TicketRendezvous::assignRanksOf(int64_t r, int64_t n, const std::string& claim) {
  std::vector<std::string> recordKeys;
  recordKeys.reserve(static_cast<size_t>(n));
  for (int64_t k = 1; k <= n; ++k) recordKeys.push_back(keys::node(r, k));
  // A node writes its record right after taking its ticket; one that died in between never will. The
  // others judge this node by its heartbeat meanwhile: keep it going between bounded waits.
  const Deadline recordsDue(clock_, settings_.liveness.expiry());
  while (!call([&] {
    return store_.wait(recordKeys,
                       std::max(milliseconds(1), std::min(settings_.liveness.interval / 2, recordsDue.remaining())));
  })) {
    if (recordsDue.expired()) {
      endRound(r, RoundEnd::kOther, "a node took a place in " + roundName(r) + " and never wrote its record");
      return;
    }
    liveness_.keepAliveIfDue();
  }
  liveness_.keepAliveIfDue();
  const auto values = call([&] { return store_.multiGet(recordKeys); });
  liveness_.keepAliveIfDue();
  std::vector<TicketRecord> records;
  std::vector<std::string> ids;
  records.reserve(values.size());
  ids.reserve(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const int64_t ticket = static_cast<int64_t>(i) + 1;
    try {
      records.push_back({ticket, decodeRecord(values[i])});
    } catch (const RendezvousValueError& e) {
      // A record no ddprun wrote (forged or corrupt): the round goes on without it, as without a node that died.
      rejectValue(r, keys::node(r, ticket), "the node holding ticket " + std::to_string(ticket), e.what());
      return;
    }
    ids.push_back(records.back().node.id);
  }
  if (const auto gone = liveness_.firstGoneOf(ids)) {
    // Its process died after it took its ticket (the store saw its connection close, or its lease lapsed): a round
    // with it would fail at once and cost everyone a last call more. Everyone joins the next round now instead.
    spdlog::warn(
        "rendezvous: node {} took a place in {} and is gone (its connection closed or its lease lapsed); "
        "starting the next round without it",
        *gone, roundName(r));
    endRound(r, RoundEnd::kDead, "node " + *gone + " was gone before " + roundName(r) + " closed");
    return;  // its "size" ("ended") wakes the nodes: they wait on it
  }
  std::vector<TicketAssignment> assignments;
  try {
    assignments = assignRanks(r, records);
  } catch (const RendezvousBackendError&) {
    throw;
  } catch (const Error& e) {
    endRound(r, RoundEnd::kOther, e.what());
    return;
  }
  std::vector<std::pair<std::string, std::string>> entries;
  entries.reserve(assignments.size());
  for (size_t i = 0; i < assignments.size(); ++i) {
    entries.emplace_back(keys::assignment(r, static_cast<int64_t>(i) + 1), encodeAssignment(assignments[i]));
  }
  call([&] { store_.multiSet(entries); });  // one request for the whole round
  // Closes the round and wakes its nodes; a node that ended the round meanwhile wrote "ended" here first and wins.
  call([&] { return store_.compareSet(keys::size(r), "", claim); });
}

RendezvousClosedError TicketRendezvous::closedError() const {
  return RendezvousClosedError("the rendezvous '" + settings_.runId +
                               "' is closed: another node ended the job (it finished, or failed with no restarts "
                               "left); a new job needs a new --rdzv-id");
}

void TicketRendezvous::endForLostNode(int64_t r, const std::string& id, NodeLiveness::Verdict verdict) {
  switch (verdict) {
    case NodeLiveness::Verdict::kConnectionClosed:
      spdlog::warn("rendezvous: node {}'s connection to the store closed (its ddprun is gone); removing it", id);
      endRound(r, RoundEnd::kDead, "node " + id + "'s connection to the store closed");
      return;
    case NodeLiveness::Verdict::kLeaseLapsed:
      spdlog::warn("rendezvous: node {}'s lease in the backend lapsed (its ddprun is gone or cut off); removing it",
                   id);
      endRound(r, RoundEnd::kDead, "node " + id + "'s lease lapsed");
      return;
    case NodeLiveness::Verdict::kStoppedHeartbeating:
      spdlog::warn("rendezvous: node {} stopped heartbeating; removing it", id);
      endRound(r, RoundEnd::kDead, "node " + id + " stopped heartbeating");
      return;
    case NodeLiveness::Verdict::kAlive: return;
  }
}

void TicketRendezvous::continueOnNewStore(int64_t r, const std::string& newId) {
  spdlog::warn(
      "rendezvous: the store was replaced (its host came back: store id '{}', was '{}'); ending rounds 0-{} in it "
      "so that every node, the new host included, continues with round {}",
      newId, storeId_, r, r + 1);
  storeId_ = newId;
  // The new store knows no round: a node that starts afresh (the host itself) begins at the hint, or at round 0
  // before anyone wrote one. The hint first, then rounds 0 and r ended: a node woken in round 0 reads the hint and
  // joins r + 1 with everyone, so round numbers and attempt directories go on (two writes, whatever r is).
  const std::string end = encodeRoundEnd(RoundEnd::kOther, "the rendezvous store was replaced");
  call([&] {
    store_.set(keys::roundHint(), std::to_string(r + 1));
    for (const int64_t k : {int64_t{0}, r}) {
      store_.compareSet(keys::ended(k), "", end);
      store_.compareSet(keys::size(k), "", "ended");
    }
  });
}

void TicketRendezvous::throwJoinTimeout(const std::string& why) {
  throw RendezvousTimeoutError("rendezvous '" + settings_.runId + "' did not complete within join_timeout (" +
                               secondsText(settings_.joinTimeout) + "): " + why);
}

RoundAssignment TicketRendezvous::next(const NodeDescriptor& self, const CancelFlag& cancel) {
  // One deadline for the whole call: leaving the previous round and joining the next share join_timeout,
  // as next_rendezvous does in torch.
  const Deadline deadline(clock_, settings_.joinTimeout);
  while (joined_) {
    try {
      // The store may have come back empty meanwhile (its host died): then the numbering goes on in it.
      const std::string storeNow = call([&] { return store_.get(keys::storeId()); }).value_or("");
      if (storeNow != storeId_) continueOnNewStore(joined_->round, storeNow);
      endRound(joined_->round, RoundEnd::kLeft,
               "node " + self_.id + " left " + roundName(joined_->round));  // a no-op if it already ended
      joined_.reset();
    } catch (const RendezvousBackendError& e) {
      throwIfCancelled(cancel);
      health_.retryAfter(e, deadline);
    }
  }
  self_ = self;
  liveness_.startAs(self.id);
  try {
    return join(deadline, cancel);
  } catch (const RendezvousCancelled&) {
    // A node that stops while joining must not stay behind in a round the others wait for.
    try {
      if (openRound_) endRound(*openRound_, RoundEnd::kLeft, "node " + self_.id + " stopped while joining");
    } catch (const std::exception&) {
    }
    openRound_.reset();
    throw;
  }
}

RoundAssignment TicketRendezvous::join(const Deadline& deadline, const CancelFlag& cancel) {
  const auto started = clock_.now();
  while (true) {
    std::optional<Joined> joined;
    try {
      joined = takePlace(deadline, cancel);
    } catch (const RendezvousBackendError& e) {
      throwIfCancelled(cancel);
      health_.retryAfter(e, deadline);
      continue;
    }
    if (!joined) continue;
    joined_ = joined;
    likelyRound_ = joined->round + 1;
    openRound_.reset();
    // Which store this round lives in: a store that comes back empty (its host restarted) has another id.
    storeId_ = joined->storeId;
    watched_ = liveness_.watch(joined->assignment.watchId);
    nextCheck_ = {};
    const RoundAssignment& a = joined->assignment.place;
    spdlog::info("rendezvous round {} complete in {:.0f} ms: {} node(s), world size {}, this node is group rank {}",
                 a.round, std::chrono::duration<double, std::milli>(clock_.now() - started).count(), a.groupWorldSize,
                 a.worldSize, a.groupRank);
    return a;
  }
}

std::optional<TicketRendezvous::Joined> TicketRendezvous::takePlace(const Deadline& deadline,
                                                                    const CancelFlag& cancel) {
  throwIfCancelled(cancel);
  liveness_.keepAliveIfDue();
  liveness_.holdLease();  // before the ticket: whoever watches this node finds its present/<id> from the start
  const int64_t r = currentRoundOfOpenJob();
  const int64_t ticket = call([&] { return store_.add(keys::tickets(r), 1); });
  health_.contact();
  const auto& limits = settings_.limits;
  if (ticket <= limits.maxNodes) {
    openRound_ = r;
    call([&] { store_.set(keys::node(r, ticket), encodeRecord(self_)); });
  }
  if (ticket == limits.minNodes) startLastCall(r);
  // The node that fills the round (ticket MAX) closes it from awaitRound's first look, inside the retry below: a
  // backend error while closing is retried like any other.
  while (true) {
    try {
      auto joined = awaitRound(r, ticket, deadline, cancel);
      if (!joined) likelyRound_ = r + 1;  // the round ended before it closed: the next join reads its successor
      return joined;
    } catch (const RendezvousBackendError& e) {
      // Keep the ticket: taking another would leave this node twice in the round.
      throwIfCancelled(cancel);
      health_.retryAfter(e, deadline);
    }
  }
}

struct TicketRendezvous::RoundWait {
  RoundWait(int64_t r, int64_t t, const Deadline& d, Clock::TimePoint firstLog)
      : round(r), ticket(t), deadline(d), nextLog(firstLog) {}
  int64_t round;
  int64_t ticket;
  const Deadline& deadline;
  bool queued = false;       ///< late: counted in the round's "waiting"
  WatchedNode closer;        ///< the node that claimed or closed the round, while it assigns the ranks
  WatchedNode firstNode;     ///< late: the round's first node
  Clock::TimePoint nextLog;  ///< when the next "still waiting" line is due
};

struct TicketRendezvous::RoundLook {
  std::string size;        ///< "N <closer>" once closed, "ended", or "" while open
  std::string lastCall;    ///< the last-call deadline (Unix epoch ms), or ""
  std::string ended;       ///< why the round ended, or ""
  int64_t taken = 0;       ///< tickets taken, at most MAX
  std::string closed;      ///< the job's "closed"
  std::string assignment;  ///< this node's, once the closer wrote it
  std::string claim;       ///< the closer's "N <closer>", or ""
  std::string storeId;
  /// The round ended before this node's assignment came: it joins the next. "ended" under the assignment is how a
  /// ddprun with another close order ends one.
  bool roundEnded() const { return !ended.empty() || size == "ended" || assignment == "ended"; }
};

std::optional<TicketRendezvous::Joined> TicketRendezvous::awaitRound(int64_t r, int64_t ticket,
                                                                     const Deadline& deadline,
                                                                     const CancelFlag& cancel) {
  RoundWait wait(r, ticket, deadline, clock_.now() + std::chrono::seconds(5));
  while (true) {
    throwIfCancelled(cancel);
    liveness_.keepAliveIfDue();
    const RoundLook look = lookAt(r, ticket);
    if (look.roundEnded()) return std::nullopt;
    if (!look.assignment.empty()) return acceptAssignment(wait, look);
    Step step = Step::kLookAgain;
    if (!look.size.empty() && look.size != look.claim) {
      // Only the closer writes "size", and only with its own claim: anything else was forged or is corrupt.
      rejectValue(r, keys::size(r), quotedNode(closerOf(look.size)) + " (as the value says)",
                  "it holds '" + printable(look.size, 80) + "', but no node claimed that close");
      return std::nullopt;
    }
    if (const auto n = closedSize(look.size)) {
      step = ticket <= *n ? awaitAssignment(wait, look.size) : awaitNextRound(wait, *n, look.closed);
    } else {
      step = advanceOpenRound(wait, look);
    }
    if (step == Step::kRoundEnded) return std::nullopt;
  }
}

std::optional<TicketRendezvous::Joined> TicketRendezvous::acceptAssignment(RoundWait& wait, const RoundLook& look) {
  try {
    return Joined{wait.round, wait.ticket,
                  decodeAssignment(look.assignment, wait.round, self_.nproc, settings_.limits.maxNodes), look.storeId};
  } catch (const RendezvousValueError& e) {
    rejectValue(wait.round, keys::assignment(wait.round, wait.ticket),
                look.claim.empty() ? std::string("an unknown node (no close was claimed)")
                                   : quotedNode(closerOf(look.claim)) + " (its closer)",
                e.what());
    return std::nullopt;
  }
}

void TicketRendezvous::rejectValue(int64_t r, const std::string& key, const std::string& writer,
                                   const std::string& what) {
  spdlog::error("rendezvous: key {} written by {} is refused: {}; {} fails as if that node were gone", keyName(key),
                writer, what, roundName(r));
  endRound(r, RoundEnd::kOther, "key " + key + " held a value no ddprun writes");
}

TicketRendezvous::RoundLook TicketRendezvous::lookAt(int64_t r, int64_t ticket) {
  auto v = call([&] {
    return store_.multiGet({keys::size(r), keys::lastCall(r), keys::ended(r), keys::tickets(r), keys::closed(),
                            keys::assignment(r, ticket), keys::closing(r), keys::storeId()});
  });
  health_.contact();
  const int64_t taken = std::min<int64_t>(number(v[3]), settings_.limits.maxNodes);
  return RoundLook{std::move(v[0]), std::move(v[1]), std::move(v[2]), taken,
                   std::move(v[4]), std::move(v[5]), std::move(v[6]), std::move(v[7])};
}

TicketRendezvous::Step TicketRendezvous::awaitAssignment(RoundWait& wait, const std::string& size) {
  // In the round: the closer is writing the assignments. One that stopped (its heartbeat did) before it finished
  // ends the round; a slow one is waited for.
  if (closerStopped(wait, closerOf(size), "closed")) return Step::kRoundEnded;
  giveUpAtDeadline(wait, "it was closed by " + quotedNode(closerOf(size)) +
                             ", which never wrote this node's assignment (key " +
                             keys::assignment(wait.round, wait.ticket) + ")");
  call([&] { return store_.wait({keys::assignment(wait.round, wait.ticket)}, pollDelay(wait.deadline)); });
  return Step::kLookAgain;
}

TicketRendezvous::Step TicketRendezvous::awaitNextRound(RoundWait& wait, int64_t n, const std::string& closed) {
  // Late: the round runs without this node. Queue for the next one, which the running nodes start when they see
  // the queue and have room.
  const int64_t r = wait.round;
  openRound_.reset();
  if (!closed.empty()) throw closedError();
  if (wait.deadline.expired()) {
    throwJoinTimeout(roundName(r) + " kept running with " + std::to_string(n) + " node(s) and never made room");
  }
  if (!wait.queued && n < settings_.limits.maxNodes) {
    call([&] { return store_.add(keys::waiting(r), 1); });
    spdlog::info("rendezvous {} is running with {} node(s); waiting for the next round", roundName(r), n);
    wait.queued = true;
  }
  if (firstNodeStopped(r, wait.firstNode)) return Step::kRoundEnded;
  logWhileWaiting(wait, "rendezvous: " + roundName(r) + " runs with " + std::to_string(n) +
                            " node(s); waiting for it to end to join the next one");
  call([&] { return store_.wait({keys::ended(r)}, pollDelay(wait.deadline)); });
  return Step::kLookAgain;
}

TicketRendezvous::Step TicketRendezvous::advanceOpenRound(RoundWait& wait, const RoundLook& look) {
  const int64_t r = wait.round;
  const auto& limits = settings_.limits;
  if (!look.closed.empty()) throw closedError();
  if (wait.deadline.expired()) {
    endRound(r, RoundEnd::kOther, "node " + self_.id + " gave up joining " + roundName(r) + " at join_timeout");
    openRound_.reset();
    throwJoinTimeout(std::to_string(look.taken) + " node(s) joined, at least " + std::to_string(limits.minNodes) +
                     " needed");
  }
  if (!look.claim.empty()) return awaitClaimer(wait, look.claim);
  if (look.taken >= limits.maxNodes) {
    tryClose(r);  // full: at once (one node wins the claim; the others find it at their next look)
    return Step::kLookAgain;
  }
  if (look.taken >= limits.minNodes && look.lastCall.empty()) {
    startLastCall(r);  // the node with ticket MIN writes it; if it stopped before it could, anyone may
    return Step::kLookAgain;
  }
  return awaitMoreNodes(wait, look);
}

TicketRendezvous::Step TicketRendezvous::awaitClaimer(RoundWait& wait, const std::string& claim) {
  // A node claimed the close and is assigning the ranks; "size" follows them. This node's own claim, left by a
  // backend error (join retries): it finishes the close (the same values again). One that stopped (its heartbeat
  // did) before it finished ends the round; a slow one is waited for.
  const std::string closer = closerOf(claim);
  if (closer == self_.id) {
    assignRanksOf(wait.round, number(claim.substr(0, claim.find(' '))), claim);
    return Step::kLookAgain;
  }
  if (closerStopped(wait, closer, "claimed")) return Step::kRoundEnded;
  giveUpAtDeadline(wait, quotedNode(closer) + " claimed its close and never finished it");
  call([&] { return store_.wait({keys::size(wait.round)}, pollDelay(wait.deadline)); });
  return Step::kLookAgain;
}

TicketRendezvous::Step TicketRendezvous::awaitMoreNodes(RoundWait& wait, const RoundLook& look) {
  const int64_t r = wait.round;
  const auto& limits = settings_.limits;
  milliseconds delay = pollDelay(wait.deadline);
  if (!look.lastCall.empty()) {
    const int64_t left = number(look.lastCall) - clock_.wallMs();
    if (left <= 0) {
      tryClose(r);
      return Step::kLookAgain;
    }
    delay = std::min(delay, milliseconds(left + 1));
  }
  logWhileWaiting(wait, "rendezvous " + roundName(r) + ": " + std::to_string(look.taken) +
                            " node(s) joined, waiting for " + std::to_string(limits.minNodes) + ".." +
                            std::to_string(limits.maxNodes));
  call([&] { return store_.wait({keys::size(r)}, delay); });
  return Step::kLookAgain;
}

void TicketRendezvous::giveUpAtDeadline(RoundWait& wait, const std::string& why) {
  if (!wait.deadline.expired()) return;
  endRound(wait.round, RoundEnd::kOther,
           "node " + self_.id + " gave up joining " + roundName(wait.round) + " at join_timeout");
  openRound_.reset();
  throwJoinTimeout(roundName(wait.round) + ": " + why);
}

bool TicketRendezvous::closerStopped(RoundWait& wait, const std::string& closer, const std::string& how) {
  wait.closer.id = closer;
  if (!liveness_.heartbeatStopped(wait.closer)) return false;
  endRound(wait.round, RoundEnd::kOther,
           roundName(wait.round) + " was " + how + " by node " + printable(closer, 80) +
               ", which stopped before it assigned the ranks");
  return true;
}

void TicketRendezvous::startLastCall(int64_t r) {
  const std::string at = std::to_string(clock_.wallMs() + settings_.limits.lastCallMs);
  call([&] { return store_.compareSet(keys::lastCall(r), "", at); });
}

void TicketRendezvous::logWhileWaiting(RoundWait& wait, const std::string& line) {
  if (clock_.now() < wait.nextLog) return;
  wait.nextLog = clock_.now() + std::chrono::seconds(10);
  spdlog::info("{}", line);
}

bool TicketRendezvous::firstNodeStopped(int64_t r, WatchedNode& first) {
  // The running nodes watch each other; but when every one of them died, nobody is left to end the round, so
  // a late node watches the round's first node (ticket 1) too.
  if (first.id.empty()) {
    const auto record = call([&] { return store_.get(keys::node(r, 1)); });
    if (!record) return false;
    try {
      first = liveness_.watch(decodeRecord(*record).id);
    } catch (const RendezvousValueError& e) {
      rejectValue(r, keys::node(r, 1), "the node holding ticket 1", e.what());
      return true;
    }
  }
  std::vector<std::string> wanted{keys::done(r, 1)};
  liveness_.appendKeysOf(wanted, first.id);
  const auto v = call([&] { return store_.multiGet(wanted); });
  if (!v[0].empty()) return false;  // it finished: the round ends with the job
  const auto verdict = liveness_.judge(first, v, 1, clock_.now());
  if (verdict == NodeLiveness::Verdict::kAlive) return false;
  endForLostNode(r, first.id, verdict);
  return true;
}

Membership TicketRendezvous::check() {
  const Membership seen = checkOnce();
  keepAlive();  // after the read, which may have counted as the heartbeat already
  return seen;
}

Membership TicketRendezvous::checkOnce() {
  try {
    if (!joined_) return Membership::kNodeLost;
    const auto now = clock_.now();
    if (now < nextCheck_) return Membership::kStable;
    nextCheck_ = now + checkInterval(now);
    return readMembership(now);
  } catch (const RendezvousBackendError& e) {
    health_.failed(e);
    return Membership::kBackendUnreachable;
  }
}

milliseconds TicketRendezvous::checkInterval(Clock::TimePoint now) const {
  const int nodes = joined_->assignment.place.groupWorldSize;
  const milliseconds paced = checkPace(nodes);
  const milliseconds urgent = std::chrono::duration_cast<milliseconds>(
      std::max<std::chrono::microseconds>(milliseconds(20), std::chrono::microseconds(50) * nodes));
  return now < urgentUntil_ ? std::min(paced, urgent) : paced;
}

Membership TicketRendezvous::readMembership(Clock::TimePoint now) {
  const int64_t r = joined_->round;
  const TicketAssignment& a = joined_->assignment;
  const bool watching = !a.watchId.empty();
  std::vector<std::string> wanted{keys::ended(r), keys::waiting(r), keys::closed(), keys::storeId()};
  if (watching) {
    wanted.push_back(keys::done(r, a.watchTicket));
    liveness_.appendKeysOf(wanted, a.watchId);
  }
  const auto v = call([&] { return store_.multiGet(wanted); });
  health_.contact();
  if (v[3] != storeId_) {
    continueOnNewStore(r, v[3]);
    return Membership::kNodeLost;
  }
  if (!v[0].empty()) return sayRoundEnded(r, v[0]);
  // The watched node, judged by this node's own clock (no clock skew matters). A node that finished is no loss.
  if (watching && v[4].empty()) {
    const auto verdict = liveness_.judge(watched_, v, 5, now);
    if (verdict != NodeLiveness::Verdict::kAlive) {
      endForLostNode(r, a.watchId, verdict);
      return Membership::kNodeLost;
    }
  }
  const int64_t waiting = number(v[1]);
  if (v[2].empty() && waiting > 0 && a.place.groupWorldSize < settings_.limits.maxNodes) {
    spdlog::info("rendezvous: {} node(s) waiting to join; starting a new round", waiting);
    endRound(r, RoundEnd::kWaiting, std::to_string(waiting) + " node(s) waiting to join");
    return Membership::kNodesWaiting;
  }
  return Membership::kStable;
}

Membership TicketRendezvous::sayRoundEnded(int64_t r, const std::string& ended) {
  const auto [kind, raw] = decodeRoundEnd(ended);
  const std::string text = printable(raw, 300);  // written by another node
  if (kind == RoundEnd::kWaiting) {
    spdlog::info("rendezvous: {} ended: {}", roundName(r), text);
    return Membership::kNodesWaiting;
  }
  spdlog::warn("rendezvous: {}", kind == RoundEnd::kLeft ? text : roundName(r) + " ended: " + text);
  return Membership::kNodeLost;
}

void TicketRendezvous::finish(NodeOutcome outcome, const CancelFlag& cancel) {
  if (self_.id.empty()) return;
  try {
    if (outcome == NodeOutcome::kStopped) {
      if (joined_) endRound(joined_->round, RoundEnd::kLeft, "node " + self_.id + " left " + roundName(joined_->round));
      return;
    }
    // torchrun's shutdown(): this node is finished and the job is over for every node.
    call([&] { return store_.compareSet(keys::closed(), "", "node " + self_.id + " ended the job"); });
    if (!joined_) return;
    const int64_t r = joined_->round;
    const int64_t count = call([&] {
      store_.set(keys::done(r, joined_->ticket), "1");
      return store_.add(keys::finished(r), 1);
    });
    if (count >= joined_->assignment.place.groupWorldSize) call([&] { store_.set(keys::allFinished(r), "1"); });
    if (settings_.hostsStore) waitForOthersToFinish(cancel);
  } catch (const RendezvousCancelled&) {
    // A signal cut the wait short; the agent has said so.
  } catch (const RendezvousBackendError& e) {
    spdlog::warn("could not record the end of this node in the rendezvous: {}", e.what());
  }
}

void TicketRendezvous::waitForOthersToFinish(const CancelFlag& cancel) {
  // Exit barrier: the other nodes still use the store this node serves.
  const int64_t r = joined_->round;
  const int64_t nodes = joined_->assignment.place.groupWorldSize;
  const Deadline deadline(clock_, settings_.closeTimeout);
  bool announced = false;
  int64_t running = 0;
  while (true) {
    const auto v = call([&] { return store_.multiGet({keys::allFinished(r), keys::finished(r), keys::ended(r)}); });
    running = nodes - number(v[1]);
    if (!v[0].empty() || !v[2].empty() || running <= 0) return;
    if (cancel || deadline.expired()) break;
    if (!announced) {
      spdlog::info("this node serves the rendezvous store: waiting up to {} (close_timeout) for {} node(s) to finish",
                   secondsText(settings_.closeTimeout), running);
      announced = true;
    }
    // Short steps, so a signal ends the wait within about a second.
    call([&] {
      return store_.wait({keys::allFinished(r)},
                         std::max(milliseconds(1), std::min(milliseconds(500), deadline.remaining())));
    });
  }
  if (!cancel) {
    spdlog::warn("close_timeout passed with {} node(s) still running; their rendezvous store goes away now", running);
  }
}

}  // namespace ddprun::rendezvous
