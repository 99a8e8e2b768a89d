#pragma once
// Owns the store's open connections, after the Asio HTTP server example's connection_manager: it starts them, forgets
// those that close, closes them all when the store stops, and runs a periodic sweep (armed while there are
// connections) that closes connections stuck inside an incomplete request or leaving their replies unread. What the
// connections share (state, limits, budget, counters, events) is the StoreContext's. Connections report to it; it
// never reaches into their I/O. Single-threaded: everything runs on the io_context's one thread.
#include <boost/asio.hpp>
#include <memory>
#include <unordered_map>

#include "store/kv_state.hpp"
#include "store/store_limits.hpp"

namespace ddprun::store {

class StoreConnection;

/// The open connections of one store, by id, and the sweep of the stuck ones.
class ConnectionManager {
 public:
  /// The sweep uses `limits`' request and reply timeouts (copied).
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
  size_t connectionCount() const { return connections_.size(); }

  /// Sends STOP_WAITING to each open connection in `woken` at once, as c10d's TCPStore server does
  /// (TCPStoreLibUvBackend.cpp, wakeupWaitingClients); connections closed meanwhile are skipped.
  void wake(const KvState::Woken& woken);

 private:
  void scheduleSweep();
  /// Closes the connections that have sat inside one request for longer than request-timeout-ms, and those that have
  /// left their replies unread for longer than reply-timeout-ms.
  void sweep();

  StoreLimits limits_;
  /// Open connections by id.
  std::unordered_map<ConnectionId, std::shared_ptr<StoreConnection>> connections_;
  ConnectionId nextId_ = 1;
  boost::asio::steady_timer sweepTimer_;
  bool stopped_ = false;
  bool sweeping_ = false;  ///< the sweep timer is armed (only while there are connections)
  /// Expires with the manager: a sweep handler already queued when it is destroyed does nothing.
  std::shared_ptr<char> lifetime_ = std::make_shared<char>();
};

}  // namespace ddprun::store
