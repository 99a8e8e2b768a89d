#pragma once
// What ddprun's agent asks of a multi-node rendezvous, whichever kind (static or dynamic) and backend
// (ddprun's store or etcd). Modelled on PyTorch's RendezvousHandler
// (torch/distributed/elastic/rendezvous/api.py): next_rendezvous, num_nodes_waiting, set_closed.
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

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

/// ddprun is stopping (a signal) while a rendezvous call was in progress.
class RendezvousCancelled : public Error {
 public:
  using Error::Error;
};

/// Blocking calls, used from one thread; each bounded by the rendezvous timeouts. Every method may throw
/// RendezvousBackendError (backend unreachable for longer than the liveness expiry, or corrupt state).
class RendezvousHandler {
 public:
  virtual ~RendezvousHandler() = default;

  /// Leaves the previous round (if any) and joins the next; returns when it is complete. Throws
  /// RendezvousTimeoutError, RendezvousClosedError, RendezvousCancelled (when `cancel` becomes true).
  virtual RoundAssignment next(const NodeDescriptor& self, const std::atomic<bool>& cancel) = 0;

  /// Keeps this node alive and looks for membership changes. Call every monitor interval.
  virtual Membership check() = 0;

  /// This node is done (its workers succeeded, or failed with no restarts left): marks it finished and,
  /// on success, closes the rendezvous. The node that hosts the rendezvous store then waits (up to
  /// close_timeout) for every node of the round to finish, so the store outlives their last use of it.
  virtual void finish(bool succeeded, const std::atomic<bool>& cancel) = 0;

  /// For logs: "c10d rendezvous 'job42' at host:port".
  virtual std::string describe() const = 0;
};

}  // namespace ddprun::rendezvous
