#pragma once
// One client connection of the store. It decides the dialect from the first bytes, feeds what arrives to
// an incremental RequestParser, applies each request, and queues replies with one write in flight at a
// time (after Asio's chat-server example). Reads are reactor-style into the StoreContext's one shared buffer,
// so an idle connection holds no buffer at all. A connection is served at most StoreLimits::turnBytes per
// turn of the event loop; the rest of its input waits behind the other connections' turns. Every byte it
// holds (partial request, unserved input, unsent replies) is reported to the StoreContext's budget.
// Replies go out in slices of at most turn-bytes per write, a stored value shared rather than copied; a
// client that sent its last requests and closed gets no replies built for them; a client that leaves its
// replies unread for reply-timeout-ms is closed, releasing them.
#include <sys/types.h>

#include <boost/asio.hpp>
#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "store/command_handler.hpp"
#include "store/kv_state.hpp"
#include "store/request_parser.hpp"

namespace ddprun::store {

class ConnectionManager;
class StoreContext;

/// One client's connection, owned by `manager`, sharing `context` with the store's other connections.
class StoreConnection : public std::enable_shared_from_this<StoreConnection> {
 public:
  /// `peer` ("address:port", from accept) names the client in log lines; `peerEndpoint` is that address, as accept
  /// saw it (a client that resets has none left to ask for later). `context` and `manager` must outlive the
  /// connection while it is open (once closed, it touches neither).
  StoreConnection(boost::asio::ip::tcp::socket socket, ConnectionId id, StoreContext& context,
                  ConnectionManager& manager, std::string peer = "", boost::asio::ip::tcp::endpoint peerEndpoint = {});
  StoreConnection(const StoreConnection&) = delete;
  StoreConnection& operator=(const StoreConnection&) = delete;

  /// Starts reading.
  void start();
  /// Queues `bytes` for sending; closes the connection when its unread replies would exceed
  /// max-pending-reply-bytes or the memory budget.
  void deliver(Reply reply);
  /// Sends STOP_WAITING: its WAIT's keys all exist, or its BARRIER's count was reached.
  void sendStopWaiting();
  /// Closes the socket, drops the connection's waits and buffers, and tells the owner's observer (ClientEvents) and
  /// the manager. `reason` is logged (rate-limited) unless empty; `limit` names the StoreLimits flag that was hit, if
  /// that is the reason.
  void close(const std::string& reason, const char* limit = nullptr);

  ConnectionId id() const { return id_; }
  const std::string& peer() const { return peer_; }
  /// When the connection entered the incomplete request it sits inside; nullopt between requests.
  std::optional<std::chrono::steady_clock::time_point> inRequestSince() const { return requestSince_; }
  /// Since when the client has taken none of its unsent replies; nullopt when none are waiting. Progress is what
  /// the kernel sees (its send queue shrinking), not only the store's own writes: with a large send buffer the
  /// store may not write for seconds while a slow client keeps reading.
  std::optional<std::chrono::steady_clock::time_point> unreadSince();
  /// Bytes of replies not yet sent.
  uint64_t unsentBytes() const { return outboxBytes_; }

 private:
  void waitReadable();
  void readAvailable();
  /// Serves `input` (first bytes: the dialect is decided on them) within this turn's share.
  void process(std::string_view input);
  /// Parses and handles requests from `input` until the turn's share is used; keeps the rest.
  void serve(std::string_view input);
  /// Applies one complete request; returns the reply bytes it queued.
  uint64_t handle(Request request);
  /// What the next request may use: its reply the smallest room left under max-reply-bytes,
  /// max-pending-reply-bytes and the memory budget; what it stores the room left in the budget, and the
  /// limits on keys, values and queues.
  RequestBudget requestBudget() const;
  /// Bytes left in the memory budget: everything stored and buffered, this connection's buffers as they are now.
  uint64_t budgetRoom() const;
  /// Writes one slice of the outbox (one write in flight at a time).
  void write();
  /// Drops `written` bytes from the front of the outbox.
  void consumeWritten(size_t written);
  /// Reports this connection's buffered bytes to the context's budget; closes it when it takes the total over
  /// the budget. Returns false when the connection is closed.
  bool account();
  uint64_t buffered() const;
  /// Whether the client has closed its side or reset the connection (what it sent before is still read).
  bool peerGone();
  /// Why `request` may not be served: it writes a key and the store takes writes from this host only from its own
  /// user, which the client is not (asked of the kernel at its first write). "" when it may.
  std::string writeRefusal(const Request& request);

  /// The socket, non-blocking.
  boost::asio::ip::tcp::socket socket_;
  /// This connection's id in KvState's waiter tables.
  ConnectionId id_;
  /// Shared with the store's other connections: state, limits, budget, counters, log limiter, events.
  StoreContext& context_;
  /// The owner: forgets this connection when it closes, and wakes the connections a request of this one completes.
  ConnectionManager& manager_;
  /// "address:port", for log lines.
  std::string peer_;
  /// The first bytes, kept until they tell the dialect (at most 5).
  std::string prologue_;
  /// Created once the dialect is known.
  std::optional<RequestParser> parser_;
  /// Input received but not yet served (its turn ran out).
  std::string leftover_;
  /// Replies not yet written, oldest first; the front's first `frontSent_` bytes are written.
  std::deque<Reply::Piece> outbox_;
  size_t frontSent_ = 0;
  uint64_t outboxBytes_ = 0;
  /// When the client last took reply bytes (or the oldest unsent reply was queued).
  std::chrono::steady_clock::time_point lastWriteProgress_{};
  /// The kernel's unsent bytes (SIOCOUTQ) when last looked at.
  int lastKernelQueue_ = -1;
  /// The client closed or reset: requests it sent are applied, but nothing is built or sent back.
  bool peerGone_ = false;
  boost::asio::ip::tcp::endpoint peerEndpoint_;
  /// Once asked, at the first write: "" when the client may write, else the client as its refusal names it ("of uid
  /// 65534"). The answer cannot change for the connection.
  std::optional<std::string> untrustedWriter_;
  /// What the context's budget currently counts for this connection.
  uint64_t accounted_ = 0;
  bool writing_ = false;
  bool closed_ = false;
  /// Set while inside an incomplete request (for the request timeout).
  std::optional<std::chrono::steady_clock::time_point> requestSince_;
};

}  // namespace ddprun::store
