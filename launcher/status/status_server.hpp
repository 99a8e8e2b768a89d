#pragma once
// The status page's HTTP/1.1 server (Boost.Beast) on the agent's own io_context, after the Asio HTTP
// server example's server / connection / manager / handler split: this class accepts and keeps the set of
// connections, HttpConnection speaks HTTP on one of them, handleStatusRequest decides the answer.
// It must never slow the agent: every wait has a deadline, every buffer a bound, and the number of
// connections a ceiling; nothing blocks the loop thread.
#include <boost/asio.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "common/error.hpp"
#include "common/tcp_listener.hpp"
#include "launcher/status/status_handler.hpp"

namespace ddprun::status {

/// Where to listen and the limits that protect the agent.
struct StatusServerOptions {
  std::string host = "127.0.0.1";  ///< IPv4 or IPv6 address ("::1", "[::1]") or a host name
  uint16_t port = 0;               ///< 0: a free port, see StatusServer::port()
  /// Open connections at most. At the ceiling a new connection closes the one that has waited longest
  /// for a request, so idle clients cannot lock a user out; when none waits, the newcomer gets 503.
  size_t maxConnections = 64;
  uint32_t maxHeaderBytes = 8 * 1024;  ///< request line and headers; more is answered 431
  uint32_t maxBodyBytes = 1024;        ///< request body; more is answered 413
  /// From a request's first byte (or from accepting the connection) to its response written; a client
  /// that is slower, or silent, is dropped without an answer.
  std::chrono::milliseconds requestTimeout{5000};
  /// How long a keep-alive connection may wait for its next request.
  std::chrono::milliseconds idleTimeout{15000};
};

/// The status server cannot listen (bad address, port in use); the message names the address.
class StatusBindError : public Error {
 public:
  using Error::Error;
};

class HttpConnection;

class StatusServer {
 public:
  /// Binds, listens and starts accepting on `io`, which the caller runs on one thread; every handler and
  /// every call of `snapshot` (once per /status.json or /metrics request) runs on that thread.
  /// Throws StatusBindError when the host does not resolve or the address cannot be bound.
  StatusServer(boost::asio::io_context& io, StatusServerOptions options, SnapshotSource snapshot);
  ~StatusServer();
  StatusServer(const StatusServer&) = delete;
  StatusServer& operator=(const StatusServer&) = delete;

  /// The bound port (the chosen one when options.port was 0).
  uint16_t port() const { return listener_->port(); }
  /// "http://127.0.0.1:8080/" or "http://[::1]:8080/": the page's address as bound.
  std::string url() const;
  /// Open connections.
  size_t connectionCount() const { return connections_.size(); }
  /// Connections accepted so far (admitted or refused).
  uint64_t acceptedCount() const { return listener_->accepted(); }
  /// Closes the listener and every connection; idempotent. Call on the loop thread.
  void stop();
  /// /status.json requests answered so far, and when the last one came (a page is open while it polls).
  uint64_t statusRequests() const { return statusRequests_; }
  std::chrono::steady_clock::time_point lastStatusRequest() const { return lastStatusRequest_; }

  // Used by HttpConnection.
  const StatusServerOptions& options() const { return options_; }
  StatusResponse answer(std::string_view method, std::string_view target) const;
  void connectionClosed(uint64_t id) { connections_.erase(id); }

 private:
  void admit(boost::asio::ip::tcp::socket socket);
  /// Closes the connection that has waited longest for a request; false when every one is answering.
  bool evictLongestWaiting();

  StatusServerOptions options_;
  SnapshotSource snapshot_;
  std::unordered_map<uint64_t, std::weak_ptr<HttpConnection>> connections_;
  uint64_t nextId_ = 1;
  bool stopped_ = false;
  mutable uint64_t statusRequests_ = 0;
  mutable std::chrono::steady_clock::time_point lastStatusRequest_{};
  /// Accepts (and pauses after EMFILE) for the connections above.
  std::unique_ptr<TcpListener> listener_;
};

}  // namespace ddprun::status
