#pragma once
// This node's rounds: the rendezvous session (multi-node), the workers' store this node serves for a round, and
// the round the next or current attempt runs in. The rendezvous' blocking calls run on the session's thread; every
// answer comes back to the agent's loop as a posted handler, so the loop never waits for another node.
#include <boost/asio.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "launcher/agent_policy.hpp"
#include "launcher/config/launch_plan.hpp"
#include "launcher/rendezvous_session.hpp"
#include "launcher/round_store.hpp"

namespace ddprun::launcher {

class NodeRounds {
 public:
  /// `config` must outlive this object.
  NodeRounds(boost::asio::io_context& io, const LaunchPlan& config);
  ~NodeRounds();

  bool multiNode() const { return session_ != nullptr; }
  /// Before the first round: a single node, and node 0 of a static job, serve one store for every round.
  void startFixedStore();
  /// Joins the next round; `onRound` on the loop once it formed (current() is then that round), `onFail` on the loop
  /// with the reason when it cannot form (a timeout, closed, the backend lost). Throws ConfigError when this node's
  /// store for the round cannot listen.
  void join(std::function<void()> onRound, std::function<void(const std::string&)> onFail);
  /// The monitor tick's membership check, skipped while one is in flight or the handler's pace says it is not due:
  /// `onChange` on the loop for nodes waiting or a node gone, `onLost` for a backend lost for good.
  void check(std::function<void(rendezvous::Membership)> onChange, std::function<void(const std::string&)> onLost);
  /// After a worker failure (multi-node): asks the rendezvous, for up to its nodeLossSeenWithin(), whether the round
  /// lost a node; `answer` on the loop.
  void confirm(std::function<void(MembershipVerdict)> answer);
  /// Tells the rendezvous how this node ended (multi-node; at once otherwise); `then` on the loop.
  void finish(NodeEnd end, std::function<void()> then);
  /// A join or an end-of-job wait in progress gives up (within about a second).
  void cancel();
  /// At the end: stops serving the store and cancels the session.
  void stop();
  /// Joins the session's thread (before anything its handlers use goes away).
  void close();

  /// The round the next or current attempt runs in (a single node: the fixed store's round).
  rendezvous::RoundAssignment current() const;
  /// The round the rendezvous formed last (none for a single node).
  const std::optional<rendezvous::RoundAssignment>& formed() const { return round_; }
  /// The round's workers' store when this agent serves it (a dynamic job's nodes each serve one per round; the
  /// workers use group rank 0's); null when another node's agent or rank 0's process serves it.
  store::StoreServer* workersStore();
  /// The store this node serves, if any (for the status page).
  store::StoreServer* server() { return store_.server(); }
  const store::StoreServer* server() const { return store_.server(); }
  /// Before an attempt: the root keys the attempt before left (round_store.hpp).
  void clearRootKeys() { store_.clearRootKeys(); }

 private:
  /// One warning once the check in flight has waited the liveness expiry (keep_alive_interval x
  /// keep_alive_max_attempt), and one line when it is answered after that.
  void sayIfSilent();
  void sayAnsweredAgain();

  boost::asio::io_context& io_;
  const LaunchPlan& config_;
  RoundStore store_;
  std::unique_ptr<RendezvousSession> session_;  ///< multi-node only
  std::optional<rendezvous::RoundAssignment> round_;
  bool checkInFlight_ = false;  ///< a membership check is on the session's thread
  /// When the check in flight went out, and whether its silence was said (a backend whose host is stopped answers
  /// nothing and fails nothing: the call waits up to read_timeout, and without this line every node is silent).
  std::chrono::steady_clock::time_point checkSince_{};
  bool saidSilent_ = false;
};

}  // namespace ddprun::launcher
