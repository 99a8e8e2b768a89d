#pragma once
// The state of a dynamic rendezvous and its transitions, with no I/O. The algorithm is PyTorch's
// (torch/distributed/elastic/rendezvous/dynamic_rendezvous.py: _RendezvousState, _RendezvousJoinOp,
// _DistributedRendezvousOpExecutor, _remove_participant_epilogue); the encoding is ddprun's own JSON, so
// ddprun nodes rendezvous with each other, not with torchrun agents (whose state is a Python pickle).
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "rendezvous/rendezvous_handler.hpp"

namespace ddprun::rendezvous {

/// A node as recorded in the state.
struct NodeRecord {
  std::string addr;
  int nproc = 1;
  std::string storeAddr;
  int storePort = 0;
  int rank = -1;  ///< group rank, set when the round completes
};

struct RendezvousState {
  int64_t round = 0;
  bool complete = false;
  std::optional<int64_t> deadlineMs;  ///< last-call deadline, Unix epoch milliseconds (nodes share wall time)
  bool closed = false;                ///< a node finished the job: no new rounds
  std::map<std::string, NodeRecord> participants;  ///< by node id (sorted: ranks follow this order)
  std::map<std::string, NodeRecord> waitList;      ///< nodes waiting for the next round
  std::set<std::string> finished;                  ///< participants of this round that are done
  int64_t writes = 0;                              ///< bumped by every write, so no two versions are equal
};

/// Sizes and timeouts of the rendezvous (--nnodes and --rdzv-conf).
struct RoundLimits {
  int minNodes = 1;
  int maxNodes = 1;
  int64_t lastCallMs = 30000;
};

/// JSON text of `state`.
std::string encodeState(const RendezvousState& state);
/// Parses encodeState's output; throws RendezvousBackendError naming what is wrong.
RendezvousState decodeState(const std::string& text);

/// Joins a round that is not complete (removing `id` from the wait list). Sets the last-call deadline
/// when MIN nodes are in, and completes the round at once when MAX are.
void addParticipant(RendezvousState& state, const std::string& id, const NodeDescriptor& self,
                    const RoundLimits& limits, int64_t nowMs);
/// Completes the round: ranks in node-id order, deadline cleared.
void markComplete(RendezvousState& state);
/// Leaves the round. A complete round that loses its last participant moves on to the next round; an
/// incomplete one that drops below MIN loses its deadline.
void removeParticipant(RendezvousState& state, const std::string& id, const RoundLimits& limits);
/// Removes `dead` nodes from the participants and the wait list; returns whether anything changed.
bool removeDeadNodes(RendezvousState& state, const std::vector<std::string>& dead, const RoundLimits& limits);

/// What a joining node does next, given the state it just read.
enum class JoinAction { kFinish, kAddToParticipants, kAddToWaitList, kMarkComplete, kWait };
JoinAction nextJoinAction(const RendezvousState& state, const std::string& id, const RoundLimits& limits,
                          int64_t nowMs);

/// This node's place in a complete round it takes part in; throws Error if it does not.
RoundAssignment assignmentOf(const RendezvousState& state, const std::string& id);

}  // namespace ddprun::rendezvous
