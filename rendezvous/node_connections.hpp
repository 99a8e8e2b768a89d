#pragma once
// A closed store connection as a liveness signal (run by the store's host, on the store's thread). A node's
// ddprun heartbeats by ADDing "/ddprun.rdzv.<run>/alive/<node>" over its one connection to the store; when its
// process dies, the kernel closes that connection at once, kill -9 included. This table remembers which
// connection speaks for which node and, when one closes, names the key that marks the node gone
// ("/ddprun.rdzv.<run>/gone/<node>"): the node that watches it (TicketRendezvous::check) ends the round at its
// next check instead of waiting out the heartbeat timeout. A node that finished or left has said so before
// closing (r/done, r/ended), so the mark changes nothing for it. A node that heartbeats again (a reconnect)
// gets its mark removed. Heartbeats stay for machines that vanish without closing (power loss, a partition).
// Every request on a connection that speaks for a node counts as a heartbeat of that node (the host ADDs to its
// counter, in memory): a node whose checks reach the store needs no ADD of its own between them, which halves what
// an idle job costs the store (NodeLiveness::keepAliveIfDue sees from its ADD's answer that its requests count).
// Pure bookkeeping: no sockets, no store; tested with made-up connection ids.
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace ddprun::store {
class StoreServer;
}

namespace ddprun::rendezvous {

class NodeConnections {
 public:
  /// A client's ADD of `key` on `connection`. When `key` is a node's heartbeat, that connection now speaks for
  /// the node; returns the node's gone mark to delete when this table set it (an earlier connection closed).
  std::optional<std::string> onAdd(uint64_t connection, const std::string& key);
  /// A request on `connection`: the heartbeat counter to bump when it speaks for a node, or nullptr.
  const std::string* onRequest(uint64_t connection) const;
  /// A closed connection: the gone mark to set for the node it spoke for, or nullopt.
  std::optional<std::string> onClose(uint64_t connection);
  /// Connections that speak for a node now.
  size_t size() const { return nodes_.size(); }

 private:
  struct Node {
    std::string goneMark;
    std::string aliveKey;
  };
  std::unordered_map<uint64_t, Node> nodes_;  ///< connection -> the node it speaks for
  std::unordered_set<std::string> marked_;    ///< gone marks set and not yet removed
};

/// The gone mark of the node whose heartbeat key is `aliveKey` ("/ddprun.rdzv.<run>/alive/<node>" ->
/// "/ddprun.rdzv.<run>/gone/<node>"), or nullopt when `aliveKey` is no heartbeat key.
std::optional<std::string> goneMarkFor(const std::string& aliveKey);

/// Makes `server` (ddprun's store, hosted by a node's ddprun) count every request of a node's connection as its
/// heartbeat, mark a node gone when the connection it heartbeats over closes, and unmark it when it heartbeats again.
/// Call before the server's io_context runs, or on its thread.
void watchNodeConnections(store::StoreServer& server);

/// Gives the store of run `runId` an id of its own (random), which every node reads when it joins a round: a store
/// that comes back empty after its host died has another id, and the nodes then go on with the next round number
/// in it (TicketRendezvous::continueOnNewStore). Call before the server's io_context runs, or on its thread.
void writeStoreId(store::StoreServer& server, const std::string& runId);

}  // namespace ddprun::rendezvous
