#pragma once
// The dynamic rendezvous on ddprun's own store (--rdzv-backend c10d), with a cost per node that stays flat:
// a round of n nodes costs O(n) store operations and O(n) bytes in all, where one compare-and-set value
// listing every node (torch's C10dRendezvousBackend, and DynamicRendezvous here) costs O(n^2) attempts of
// O(n) bytes. The semantics are torch's (dynamic_rendezvous.py): MIN..MAX nodes, the last call counted from
// the MIN-th join, join_timeout, rounds, group ranks in node-id order, heartbeats and dead nodes, nodes
// waiting for the next round, the closed job, the store host's exit barrier.
//
// The protocol (keys in round_keys.hpp, all under "/ddprun.rdzv.<runId>/"):
//  - join: ADD r/tickets (a node's ticket k is its place in the round), SET r/node/k (its record); the node
//    with ticket MIN writes the last-call deadline, the node with ticket MAX closes the round.
//  - close: whoever first sees MAX tickets, or the last call passed, compare-sets r/size to "N <id>" (N = the
//    tickets taken, at most MAX; one node wins), reads the N records in one MULTI_GET and writes every node's
//    assignment under its ticket (ranks in node-id order). Nodes wait on their own assignment key.
//  - a node whose ticket is beyond N is late: it ADDs r/waiting and waits for r/ended.
//  - running: every node heartbeats (ADD alive/<id>; node_liveness.hpp) and watches one other node, the next group
//    rank, plus the round's "ended" and "waiting" keys: O(1) per node per check. On ddprun's own store, the store's
//    host marks a node gone/<id> the moment the connection it heartbeats over closes (its process died;
//    node_connections.hpp): its watcher ends the round at its next check, not after the heartbeat timeout. On etcd,
//    each node holds present/<id> under a short lease (node_lease.hpp) and its watcher reads the key's absence the
//    same way. A dead node, a node that leaves, or nodes waiting with room left end the round (r/ended, first writer
//    wins); every node then joins r+1.
//  - end of job: compare-set "closed", SET r/done/k, ADD r/finished; the last sets r/all_finished, which the
//    store's host waits for (close_timeout) before its store goes away.
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "common/clock.hpp"
#include "rendezvous/backend_health.hpp"
#include "rendezvous/node_lease.hpp"
#include "rendezvous/node_liveness.hpp"
#include "rendezvous/rendezvous_handler.hpp"
#include "rendezvous/round_keys.hpp"
#include "store/prefix_store.hpp"

namespace ddprun::rendezvous {

/// Sizes of a round (--nnodes MIN:MAX) and the last call (--rdzv-conf last_call_timeout).
struct RoundLimits {
  int minNodes = 1;
  int maxNodes = 1;
  int64_t lastCallMs = 30000;
};

/// --nnodes and the --rdzv-conf timeouts (seconds in the flags, milliseconds here).
struct DynamicRendezvousSettings {
  std::string runId;
  RoundLimits limits;
  std::chrono::milliseconds joinTimeout{600000};
  std::chrono::milliseconds closeTimeout{30000};
  LivenessSettings liveness;
  bool hostsStore = false;                  ///< this node serves the backend store: wait for the others in finish()
  Clock* clock = &SystemClock::instance();  ///< time and sleep (a fake clock in tests)
};

/// The ticket protocol above, one node's side of it; liveness (its heartbeats and its verdicts on the node it
/// watches) is NodeLiveness's.
class TicketRendezvous : public RendezvousHandler {
 public:
  /// Keys live under "/ddprun.rdzv.<runId>/" of `store` (any Store: the TCP client, or the in-memory one in
  /// tests); time and heartbeat ages come from settings.clock. Store errors surface as RendezvousBackendError.
  /// `lease` (etcd-v3; null on ddprun's store, whose host marks closed connections instead): this node holds
  /// its present/<id> key under it, and a watched node whose key is gone is gone.
  TicketRendezvous(std::shared_ptr<store::Store> store, DynamicRendezvousSettings settings,
                   std::shared_ptr<NodeLease> lease = nullptr);

  RoundAssignment next(const NodeDescriptor& self, const CancelFlag& cancel) override;
  /// Reads the store at most every min(2 ms x nodes, keep_alive_interval / 2), so 1,024 nodes checking
  /// every 0.1 s cost the store about 500 reads a second, not 10,000; after expectChange(), for the membership
  /// window, every max(20 ms, 50 us x nodes) if that is sooner (1,024 nodes whose workers all failed: about 20,000
  /// reads a second, for at most the window, where most stop at their first read: the round has ended).
  Membership check() override;
  void expectChange() override;
  std::chrono::milliseconds checkDueIn() const override;
  void keepAlive() noexcept override;
  void finish(NodeOutcome outcome, const CancelFlag& cancel) override;
  std::string describe() const override;
  /// 500 ms on ddprun's store (a closed connection); with a lease, its lapse time plus the watcher's check.
  std::chrono::milliseconds nodeLossSeenWithin() const override;

 private:
  /// The round this node runs in.
  struct Joined {
    int64_t round = 0;
    int64_t ticket = 0;
    TicketAssignment assignment;
    std::string storeId;  ///< keys::storeId() as read with the assignment
  };

  /// NodeLiveness::call: every store request, so that the liveness knows which counted as heartbeats.
  template <typename Call>
  auto call(Call&& fn) -> decltype(fn());
  /// check() without its heartbeat: reads the store when a check is due (checkInterval), else answers kStable.
  Membership checkOnce();
  /// How long after a check at `now` the next reads the store: checkPace, or in expectChange()'s window every
  /// max(20 ms, 50 us x nodes) if that is sooner.
  std::chrono::milliseconds checkInterval(Clock::TimePoint now) const;
  /// One read of the running round (its end, waiting nodes, the job's close, the store's id, the watched node):
  /// ends the round for a lost watched node or for waiting nodes with room left.
  Membership readMembership(Clock::TimePoint now);
  /// Logs why round `r` ended (its "ended" value) and says what that means to this node.
  Membership sayRoundEnded(int64_t r, const std::string& ended);
  RoundAssignment join(const Deadline& deadline, const CancelFlag& cancel);
  /// Takes a ticket in the current round and waits for it to close; nullopt when the round ended first (or
  /// this node was late and the round it waited for ended): join the next one.
  std::optional<Joined> takePlace(const Deadline& deadline, const CancelFlag& cancel);
  /// Waits (in bounded steps) until round `r` closes with this node's `ticket` in it.
  std::optional<Joined> awaitRound(int64_t r, int64_t ticket, const Deadline& deadline, const CancelFlag& cancel);
  /// What awaitRound carries from one look at its round to the next.
  struct RoundWait;
  /// One look at a round from this node's ticket.
  struct RoundLook;
  /// What one step of awaitRound leaves to do.
  enum class Step { kLookAgain, kRoundEnded };
  /// This node's assignment in `look`, checked (decodeAssignment); a value no ddprun writes fails the round (nullopt).
  std::optional<Joined> acceptAssignment(RoundWait& wait, const RoundLook& look);
  /// One error line naming `key`, who wrote it and `what` is wrong with it; ends round `r` as for a node gone.
  void rejectValue(int64_t r, const std::string& key, const std::string& writer, const std::string& what);
  /// At join_timeout: ends the round and throws the join timeout saying `why` this node is still waiting.
  void giveUpAtDeadline(RoundWait& wait, const std::string& why);
  /// Reads round `r` as this node's `ticket` sees it, in one request.
  RoundLook lookAt(int64_t r, int64_t ticket);
  /// In the closed round: waits for this node's assignment, or ends the round if its closer (`size` names it)
  /// stopped before writing it.
  Step awaitAssignment(RoundWait& wait, const std::string& size);
  /// Late, the round running with `n` nodes: queues for the next round (if this one has room) and waits for this
  /// one to end; ends it if its first node is gone. Throws when the job is `closed` or at join_timeout.
  Step awaitNextRound(RoundWait& wait, int64_t n, const std::string& closed);
  /// The round is open: throws when the job is closed, or ends the round and throws at join_timeout; else waits
  /// for a claimed close, closes a full round, starts the last call once MIN joined, or waits for more nodes.
  Step advanceOpenRound(RoundWait& wait, const RoundLook& look);
  /// Another node claimed the close (`claim`): waits for it, or ends the round if it stopped. This node's own claim
  /// (a backend error cut its close short) it finishes itself.
  Step awaitClaimer(RoundWait& wait, const std::string& claim);
  /// Waits for more nodes until the last call (if set), and closes the round once it has passed.
  Step awaitMoreNodes(RoundWait& wait, const RoundLook& look);
  /// Whether node `closer`, which `how` ("claimed", "closed") the round, stopped heartbeating before it assigned
  /// the ranks; then the round is ended here.
  bool closerStopped(RoundWait& wait, const std::string& closer, const std::string& how);
  /// Writes round `r`'s last-call deadline (now + last_call_timeout) unless a node already has.
  void startLastCall(int64_t r);
  /// Logs `line` while awaitRound waits: 5 s after it started, then at most every 10 s.
  void logWhileWaiting(RoundWait& wait, const std::string& line);
  /// Throws closedError() when the job is closed; else the lowest round not yet ended, from the hint onwards. One
  /// request when the hint names the round this node expects (likelyRound_) and it has not ended, as on every first
  /// join; otherwise one more GET for each round looked at from the hint on (the ended ones and the first open one).
  int64_t currentRoundOfOpenJob();
  /// Closes round `r` if nobody has: N = tickets taken (at most MAX); the winner assigns the ranks.
  void tryClose(int64_t r);
  void assignRanksOf(int64_t r, int64_t n, const std::string& claim);
  /// Ends round `r` (the first reason written stays) and wakes anyone still joining it.
  void endRound(int64_t r, RoundEnd kind, const std::string& text);
  /// For a late node: whether round `r`'s first node is lost (gone, or its heartbeat stopped; then the round is
  /// ended here).
  bool firstNodeStopped(int64_t r, WatchedNode& first);
  void waitForOthersToFinish(const CancelFlag& cancel);
  [[noreturn]] void throwJoinTimeout(const std::string& why);
  /// "the rendezvous '<id>' is closed: another node ended the job …", for every place that finds it closed.
  RendezvousClosedError closedError() const;
  /// Says how node `id` was found gone (`verdict`, not kAlive) and ends round `r` for it.
  void endForLostNode(int64_t r, const std::string& id, NodeLiveness::Verdict verdict);
  /// The store's id differs from the one this node joined in (its host came back with an empty store): ends
  /// rounds 0..r in the new store and points the round hint at r + 1, so numbering goes on for every node.
  void continueOnNewStore(int64_t r, const std::string& newId);
  std::chrono::milliseconds pollDelay(const Deadline& deadline) const;
  /// How often check() reads the store in a round of `nodes`: min(2 ms x nodes, keep_alive_interval / 2).
  std::chrono::milliseconds checkPace(int nodes) const;

  store::PrefixStore store_;
  DynamicRendezvousSettings settings_;
  Clock& clock_;
  BackendHealth health_;
  NodeLiveness liveness_;
  NodeDescriptor self_;
  std::optional<Joined> joined_;
  std::optional<int64_t> openRound_;  ///< a round this node holds a place in that has not started yet
  int64_t likelyRound_ = 0;  ///< the round this node expects to join next: 0, then the one after the last it saw

  Clock::TimePoint nextCheck_{};
  Clock::TimePoint urgentUntil_{};  ///< expectChange(): quicker checks until then
  WatchedNode watched_;             ///< the next group rank, while running
  std::string storeId_;             ///< the store's id when this node joined its round ("" on etcd: nobody writes one)
};

}  // namespace ddprun::rendezvous
