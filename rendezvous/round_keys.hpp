#pragma once
// The keys of a ticket rendezvous (TicketRendezvous) and what they hold, with no I/O: key names, the JSON of
// a node's record and of its assignment, and the rank assignment itself. Ranks follow PyTorch's
// _mark_rendezvous_complete (torch/distributed/elastic/rendezvous/dynamic_rendezvous.py): group ranks in
// sorted node-id order, global ranks contiguous per node.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rendezvous/rendezvous_handler.hpp"

namespace ddprun::rendezvous {

/// Key names under the run's prefix ("/ddprun.rdzv.<runId>/"). Round keys are "r<round>/…".
namespace round_keys {
std::string prefix(const std::string& runId);  ///< "/ddprun.rdzv.<runId>": every key below lives under it
std::string closed();                          ///< the job is over (a node finished or gave up): no new round starts
std::string roundHint();  ///< the lowest round that may still be current (a hint: joiners scan forward)
std::string storeId();    ///< written by the store's host when it starts: a store that came back has another
std::string alive(const std::string& nodeId);     ///< heartbeat counter
std::string gone(const std::string& nodeId);      ///< set by the store's host when the node's connection closed
std::string present(const std::string& nodeId);   ///< etcd-v3: exists while the node's lease lives (node_lease.hpp)
std::string tickets(int64_t round);               ///< ADD counter: a node's ticket is its place in the round
std::string node(int64_t round, int64_t ticket);  ///< the record of the node holding `ticket`
std::string lastCall(int64_t round);              ///< last-call deadline, Unix epoch ms, written once
std::string closing(int64_t round);  ///< "N <closer>": the closer's claim, written once before it assigns the ranks
std::string size(int64_t round);     ///< "N <closer>" once closed with N nodes (after the assignments), or "ended"
std::string assignment(int64_t round, int64_t ticket);  ///< the node's place, written by the closer
std::string ended(int64_t round);    ///< "<kind> <text>": why the round ended (written once: the first wins)
std::string waiting(int64_t round);  ///< ADD counter of nodes waiting for the next round
std::string done(int64_t round, int64_t ticket);  ///< the node finished the job (so nobody calls it dead)
std::string finished(int64_t round);              ///< ADD counter of finished nodes
std::string allFinished(int64_t round);           ///< written by the last node to finish
}  // namespace round_keys

/// The highest round number: torch reads TORCHELASTIC_RESTART_COUNT (the round) as a C int.
constexpr int64_t kMaxRound = 2147483646;
/// The largest world size and local world size a record or an assignment may name (a C int in torch's env).
constexpr int64_t kMaxWorldSize = 1 << 24;

/// A value read from the rendezvous store that ddprun would never write (a forged or corrupt key): the round it
/// belongs to fails as if the node that wrote it were gone.
class RendezvousValueError : public Error {
 public:
  using Error::Error;
};

/// Why a round ended, as written into its "ended" key.
enum class RoundEnd {
  kLeft,     ///< a node left (its workers failed or it was stopped)
  kDead,     ///< a node stopped heartbeating
  kWaiting,  ///< nodes wait to join and there is room
  kOther,    ///< anything else (a join timeout, a round whose ranks were never assigned)
};

/// "<kind> <text>" for the "ended" key.
std::string encodeRoundEnd(RoundEnd kind, const std::string& text);
/// Parses encodeRoundEnd's output (anything unknown reads as kOther with the whole value as text).
std::pair<RoundEnd, std::string> decodeRoundEnd(const std::string& value);

/// A node's record in a round (what it wrote under its ticket).
struct TicketRecord {
  int64_t ticket = 0;
  NodeDescriptor node;
};

/// A node's assignment as the closer publishes it: its place in the round, and the node it watches
/// (the next by group rank, whose heartbeat it judges; none in a round of one node).
struct TicketAssignment {
  RoundAssignment place;
  std::string watchId;  ///< empty: nobody to watch
  int64_t watchTicket = 0;
};

std::string encodeRecord(const NodeDescriptor& node);
/// Throws RendezvousValueError naming the field when `text` is not a record encodeRecord could have written: its id
/// and address printable ASCII (isPrintableName), 1..kMaxWorldSize local ranks, a store port in 1..65535.
NodeDescriptor decodeRecord(const std::string& text);
std::string encodeAssignment(const TicketAssignment& a);
/// Throws RendezvousValueError naming the field when `text` is not an assignment assignRanks could have made for a
/// node with `nproc` local ranks in round `round` of at most `maxNodes` nodes: the same round, 0 <= group rank <
/// group world size <= maxNodes, the node's ranks inside 0..world size <= kMaxWorldSize, a printable MASTER_ADDR
/// and MASTER_PORT in 1..65535, a printable watched node id.
TicketAssignment decodeAssignment(const std::string& text, int64_t round, int nproc, int maxNodes);

/// A round number as the "round" hint holds it: nullopt unless decimal digits naming 0..kMaxRound.
std::optional<int64_t> parseRound(const std::string& value);

/// Every node's assignment, in the order of `records`: group ranks in node-id order, global ranks contiguous
/// per node, MASTER_ADDR/PORT from group rank 0's workers' store, each node watching the next group rank
/// (the last watches the first). `round` is copied into each. Throws Error for an empty list or a repeated id.
std::vector<TicketAssignment> assignRanks(int64_t round, const std::vector<TicketRecord>& records);

/// The node count in a "size" value ("N <closer>"), or nullopt for "ended" or an unparsable value (or a count
/// past kMaxWorldSize).
std::optional<int64_t> closedSize(const std::string& sizeValue);

}  // namespace ddprun::rendezvous
