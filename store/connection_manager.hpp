#pragma once
// Owns the store's connections (after the Asio HTTP server's connection_manager) and what they share:
// the key-value state, the limits, one memory budget for everything they buffer, one read buffer, the
// warning limiter, and a periodic sweep (armed while there are connections) that closes connections stuck inside an
// incomplete request or leaving their replies unread.
// Connections report to it; it never reaches into their I/O. Single-threaded: everything runs on the
// io_context's one thread.
#include <boost/asio.hpp>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "store/kv_state.hpp"
#include "store/log_text.hpp"
#include "store/store_limits.hpp"

namespace ddprun::store {

class StoreConnection;

/// What the store's owner may learn of its clients, on the store's thread: a client sent a request (any, before it is
/// served), a client ADDed to `key`, a connection closed (the client went away, was closed for breaking a limit, or
/// the store stops). The rendezvous uses it to count a node's requests as its heartbeats and to tell a node whose
/// process died at once (rendezvous/node_connections.hpp).
struct ClientEvents {
  std::function<void(ConnectionId, const std::string& key)> added;
  std::function<void(ConnectionId)> closed;
  std::function<void(ConnectionId)> requested;
};

class ConnectionManager {
 public:
  ConnectionManager(boost::asio::io_context& io, const StoreLimits& limits);
  ~ConnectionManager();
  ConnectionManager(const ConnectionManager&) = delete;
  ConnectionManager& operator=(const ConnectionManager&) = delete;

  /// Adds a connection and starts it.
  void start(std::shared_ptr<StoreConnection> connection);
  /// Forgets a connection that closed itself.
  void remove(ConnectionId id);
  /// Closes every connection and stops the sweep.
  void stopAll();
  /// The id for the next connection.
  ConnectionId nextId() { return nextId_++; }

  /// Installs the owner's observer (replacing any earlier one).
  void setClientEvents(ClientEvents events) { events_ = std::move(events); }
  /// Tells the observer, if any.
  void noteAdded(ConnectionId id, const std::string& key) {
    if (events_.added) events_.added(id, key);
  }
  void noteRequest(ConnectionId id) {
    if (events_.requested) events_.requested(id);
  }
  void noteClosed(ConnectionId id) {
    if (events_.closed && !stopped_) events_.closed(id);
  }

  /// Sends STOP_WAITING to each open connection in `woken` at once, as c10d's TCPStore server does
  /// (TCPStoreLibUvBackend.cpp, wakeupWaitingClients); connections closed meanwhile are skipped.
  void wake(const KvState::Woken& woken);

  /// Changes the budget's count by `delta` bytes; returns the new total.
  uint64_t account(int64_t delta);
  /// Bytes buffered by all connections together.
  uint64_t bufferedBytes() const { return buffered_; }
  /// What the memory budget counts: the stored data and every connection's buffers.
  uint64_t usedBytes() const { return buffered_ + state_.storedBytes(); }

  size_t connectionCount() const { return connections_.size(); }
  /// Counts one request served (for the status page and metrics).
  void countRequest() { ++requests_; }
  /// Counts reply bytes queued for sending.
  void countReplyBytes(uint64_t bytes) { replyBytes_ += bytes; }
  uint64_t replyBytesQueued() const { return replyBytes_; }
  uint64_t requestsServed() const { return requests_; }
  KvState& state() { return state_; }
  const KvState& state() const { return state_; }
  int64_t keyCount() const { return state_.numKeys(); }
  size_t waitingConnections() const { return state_.waitingConnections(); }
  const StoreLimits& limits() const { return limits_; }
  WarningLimiter& warnings() { return warnings_; }
  /// The loop's one read buffer: a connection reads into it and serves the bytes at once.
  char* readBuffer() { return readBuffer_.get(); }
  size_t readBufferSize() const { return kReadBufferBytes; }

 private:
  void scheduleSweep();
  /// Closes the connections that have sat inside one request for longer than request-timeout-ms.
  void sweep();

  /// The limits, copied at start.
  StoreLimits limits_;
  /// Keys, values and waiters.
  KvState state_;
  /// Open connections by id.
  std::unordered_map<ConnectionId, std::shared_ptr<StoreConnection>> connections_;
  ConnectionId nextId_ = 1;
  /// Sum of every connection's buffered bytes.
  uint64_t buffered_ = 0;
  /// Requests served since the store started.
  uint64_t requests_ = 0;
  /// Reply bytes queued since the store started.
  uint64_t replyBytes_ = 0;
  WarningLimiter warnings_;
  ClientEvents events_;
  static constexpr size_t kReadBufferBytes = 64 * 1024;
  /// Not zero-filled: each agent serves a workers' store, most of them never read, and zeroing 64 KiB touched 16
  /// pages at every agent's start.
  std::unique_ptr<char[]> readBuffer_;
  boost::asio::steady_timer sweepTimer_;
  bool stopped_ = false;
  bool sweeping_ = false;  ///< the sweep timer is armed (only while there are connections)
  /// Expires with the manager: a sweep handler already queued when it is destroyed does nothing.
  std::shared_ptr<char> lifetime_ = std::make_shared<char>();
};

}  // namespace ddprun::store
