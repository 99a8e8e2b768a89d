#pragma once
// What every connection of one store shares besides the loop, as the Asio HTTP server example's connections share
// its request_handler while its connection_manager owns them: the key-value state, the limits, one memory budget for
// everything stored and buffered, the loop's one read buffer, the counters, the rate-limited warnings, who may write
// and the owner's client events. Each StoreConnection gets it by reference; the ConnectionManager owns the connections
// themselves. Single-threaded: everything runs on the io_context's one thread.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "store/kv_state.hpp"
#include "store/local_client_uid.hpp"
#include "store/log_text.hpp"
#include "store/store_limits.hpp"

namespace ddprun::store {

/// What the store's owner may learn of its clients, on the store's thread: a client sent a request (any, before it is
/// served), a client ADDed to `key`, a connection closed (the client went away or was closed for breaking a limit;
/// not the connections the store closes as it stops). The rendezvous uses it to count a node's requests as its
/// heartbeats and to tell a node whose process died at once (rendezvous/node_connections.hpp).
struct ClientEvents {
  std::function<void(ConnectionId, const std::string& key)> added;
  std::function<void(ConnectionId)> closed;
  std::function<void(ConnectionId)> requested;
};

/// The state, limits, budget, counters and events one store's connections share.
class StoreContext {
 public:
  /// Copies `limits`.
  explicit StoreContext(const StoreLimits& limits);
  StoreContext(const StoreContext&) = delete;
  StoreContext& operator=(const StoreContext&) = delete;

  /// Keys, values and waiters.
  KvState& state() { return state_; }
  const KvState& state() const { return state_; }
  const StoreLimits& limits() const { return limits_; }
  WarningLimiter& warnings() { return warnings_; }

  /// Changes the budget's count of buffered bytes by `delta`; returns the new total.
  uint64_t account(int64_t delta);
  /// Bytes buffered by all connections together.
  uint64_t bufferedBytes() const { return buffered_; }
  /// What the memory budget counts: the stored data and every connection's buffers.
  uint64_t usedBytes() const { return buffered_ + state_.storedBytes(); }

  /// Counts one request served (for the status page and metrics).
  void countRequest() { ++requests_; }
  /// Counts reply bytes queued for sending.
  void countReplyBytes(uint64_t bytes) { replyBytes_ += bytes; }
  uint64_t replyBytesQueued() const { return replyBytes_; }
  uint64_t requestsServed() const { return requests_; }
  int64_t keyCount() const { return state_.numKeys(); }
  size_t waitingConnections() const { return state_.waitingConnections(); }

  /// Writes from this host only from this process's user and root (StoreServerOptions::ownUserWritesOnly).
  void setOwnUserWritesOnly(bool only) { ownUserWritesOnly_ = only; }
  bool ownUserWritesOnly() const { return ownUserWritesOnly_; }
  /// Who owns a local client's socket (one netlink socket for all the connections).
  ClientOwners& clientOwners() { return clientOwners_; }

  /// Installs the owner's observer (replacing any earlier one).
  void setClientEvents(ClientEvents events) { events_ = std::move(events); }
  /// The store is stopping: the connections it closes from now on are not reported as closed (its owner may be
  /// going away too).
  void stopEvents() { eventsStopped_ = true; }
  /// Tell the observer, if any.
  void noteAdded(ConnectionId id, const std::string& key) {
    if (events_.added) events_.added(id, key);
  }
  void noteRequest(ConnectionId id) {
    if (events_.requested) events_.requested(id);
  }
  void noteClosed(ConnectionId id) {
    if (events_.closed && !eventsStopped_) events_.closed(id);
  }

  /// The loop's one read buffer: a connection reads into it and serves the bytes at once.
  char* readBuffer() { return readBuffer_.get(); }
  size_t readBufferSize() const { return kReadBufferBytes; }

 private:
  StoreLimits limits_;
  KvState state_;
  /// Sum of every connection's buffered bytes.
  uint64_t buffered_ = 0;
  /// Requests served since the store started.
  uint64_t requests_ = 0;
  /// Reply bytes queued since the store started.
  uint64_t replyBytes_ = 0;
  WarningLimiter warnings_;
  ClientEvents events_;
  bool eventsStopped_ = false;
  bool ownUserWritesOnly_ = false;
  ClientOwners clientOwners_;
  static constexpr size_t kReadBufferBytes = 64 * 1024;
  /// Not zero-filled: each agent serves a workers' store, most of them never read, and zeroing 64 KiB touched 16
  /// pages at every agent's start.
  std::unique_ptr<char[]> readBuffer_;
};

}  // namespace ddprun::store
