#pragma once
// What ddprun's agent asks of a multi-node rendezvous, whichever kind (static or dynamic) and backend
// (ddprun's store or etcd). Modelled on PyTorch's RendezvousHandler
// (torch/distributed/elastic/rendezvous/api.py): next_rendezvous, num_nodes_waiting, set_closed.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/cancel_flag.hpp"
#include "common/error.hpp"

namespace ddprun::rendezvous {

/// One node (one ddprun agent) as it presents itself to a round.
struct NodeDescriptor {
  std::string id;         ///< unique per agent process: "<addr>_<pid>"
  std::string addr;       ///< the address other nodes reach this node at (--local-addr or host name)
  int nproc = 1;          ///< this node's local world size
  std::string storeAddr;  ///< where this node would serve the workers' store if it became group rank 0
  int storePort = 0;
};

/// Where one node's workers sit in a completed round.
struct RoundAssignment {
  int64_t round = 0;
  int groupRank = 0;       ///< this node's rank among the round's nodes (GROUP_RANK)
  int groupWorldSize = 1;  ///< nodes in the round
  int rankOffset = 0;      ///< global rank of this node's local rank 0 (ranks are contiguous per node)
  int worldSize = 1;       ///< sum of every node's local world size
  std::string masterAddr;  ///< group rank 0's workers' store (MASTER_ADDR / MASTER_PORT)
  int masterPort = 0;
};

/// What a monitor tick saw.
enum class Membership {
  kStable,        ///< nothing to do
  kNodesWaiting,  ///< nodes wait to join and there is room: re-rendezvous to take them in (scale-up)
  kNodeLost,      ///< a node of this round left or stopped heartbeating: re-rendezvous without it
  /// The backend did not answer this check (an outage, reported as lost after the liveness expiry): nothing to
  /// do while the workers run; with a worker failure, the store's host has likely died with its workers.
  kBackendUnreachable,
};

/// The job is over (a node finished and closed the rendezvous); no new round can start.
class RendezvousClosedError : public Error {
 public:
  using Error::Error;
};

/// A join did not complete within join_timeout.
class RendezvousTimeoutError : public Error {
 public:
  using Error::Error;
};

/// How this node's part in the job ended (RendezvousHandler::finish).
enum class NodeOutcome {
  kSucceeded,  ///< every worker exited 0
  kFailed,     ///< the worker group failed with no restarts left
  kStopped,    ///< ddprun was stopped by a signal
};

/// ddprun is stopping (a signal) while a rendezvous call was in progress.
class RendezvousCancelled : public Error {
 public:
  using Error::Error;
};

/// The membership window where a node's death closes its store connection (RendezvousHandler::nodeLossSeenWithin).
constexpr std::chrono::milliseconds kClosedConnectionWindow{500};

/// Blocking calls, used from one thread; each bounded by the rendezvous timeouts. Every method may throw
/// RendezvousBackendError (backend unreachable for longer than the liveness expiry, or corrupt state).
class RendezvousHandler {
 public:
  virtual ~RendezvousHandler() = default;

  /// Leaves the previous round (if any) and joins the next; returns when it is complete. Throws
  /// RendezvousTimeoutError, RendezvousClosedError, RendezvousCancelled (when `cancel` becomes true).
  virtual RoundAssignment next(const NodeDescriptor& self, const CancelFlag& cancel) = 0;

  /// Looks for membership changes (and keeps this node alive). Call every monitor interval.
  virtual Membership check() = 0;

  /// How long until check() next reads the backend (it paces its reads by the job's size): a call before then only
  /// keeps the node alive, which keepAlive() does on its own timer, so a caller may skip it. 0: at the next call.
  virtual std::chrono::milliseconds checkDueIn() const { return std::chrono::milliseconds(0); }

  /// The caller suspects a membership change now (its workers just failed): check() looks at the backend at a
  /// quicker pace for the next nodeLossSeenWithin(), where it may otherwise pace its reads by the job's size.
  virtual void expectChange() {}

  /// Shows that this node is alive, if a heartbeat is due; never throws (check() reports a lost backend).
  /// Called on a timer of its own, so liveness does not depend on --monitor-interval.
  virtual void keepAlive() noexcept = 0;

  /// This node is done. Succeeded or failed: it is marked finished and the rendezvous is closed, as torchrun's
  /// shutdown() does (a job whose node has given up cannot go on; later joiners fail at once); the node that
  /// hosts the rendezvous store then waits (up to close_timeout) for every node of the round to finish, so
  /// the store outlives their last use of it. Stopped by a signal: the node only leaves its round, so that
  /// the others regroup without waiting for its heartbeat to expire.
  virtual void finish(NodeOutcome outcome, const CancelFlag& cancel) = 0;

  /// For logs: "c10d rendezvous 'job42' at host:port".
  virtual std::string describe() const = 0;

  /// The membership window: how long after a node's process dies check() names the loss, at most. A multi-node
  /// worker failure waits this long for the verdict (launcher/agent_policy.hpp): a node's death makes its peers'
  /// collectives fail within about 0.1-0.2 s, before their ddprun hears of it, and such a failure is the
  /// membership change it is (torchelastic: "membership changes do not count as retries"); a failure with no lost
  /// node restarts this much later. kClosedConnectionWindow on ddprun's store, whose host sees the closed
  /// connection in milliseconds (node_connections.hpp); about 4 s on etcd-v3 (its leases lapse after 3 s). A node
  /// that vanished without a trace (power loss) is found only after the heartbeat timeout: a failure it caused
  /// counts as one.
  virtual std::chrono::milliseconds nodeLossSeenWithin() const { return kClosedConnectionWindow; }
};

}  // namespace ddprun::rendezvous
