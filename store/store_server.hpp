#pragma once
// ddprun's store: a single-threaded Boost.Asio TCP server that speaks PyTorch's TCPStore wire protocol
// (1.13 and 2.x dialects, told apart per connection), so stock LibTorch and Python torch.distributed
// clients work against it, inside ddprun or standalone (ddprun-store). Every size and every buffered
// byte is bounded by StoreLimits; a malformed, oversized, stuck or greedy client loses its own connection
// only, and a slow or silent client never blocks the others.
#include <boost/asio.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/tcp_listener.hpp"
#include "store/connection_manager.hpp"
#include "store/store_context.hpp"
#include "store/store_errors.hpp"
#include "store/store_limits.hpp"

namespace ddprun::store {

/// Binding and limits.
struct StoreServerOptions {
  std::string host = "0.0.0.0";  ///< address to bind ("127.0.0.1" for --standalone)
  uint16_t port = 0;             ///< 0: a free port, see StoreServer::port()
  StoreLimits limits;
  /// Writes (SET, ADD, COMPARE_SET, DELETE, …) from this host only from this process's user and root: another
  /// local user's client may read, and its first write closes its connection with one line. Clients on other hosts
  /// cannot be told apart (TCP carries no user) and may write. The client's owner is asked of the kernel once, when
  /// it first writes (local_client_uid.hpp).
  bool ownUserWritesOnly = false;
};

/// One store: its listener, its connections and what they share.
class StoreServer {
 public:
  /// Raises this process's soft open-file limit to its hard limit, binds, and starts accepting on `io`
  /// (run by the caller, on one thread). Throws StoreBindError.
  StoreServer(boost::asio::io_context& io, const StoreServerOptions& options);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  /// The bound port (useful with port 0).
  uint16_t port() const { return listener_->port(); }
  const std::string& host() const { return options_.host; }

  /// Closes the listener and every connection. Call on the io_context's thread (or post it).
  void stop();

  /// Open connections (for tests and logs).
  size_t connectionCount() const { return connections_.connectionCount(); }
  /// Connections accepted since the server started.
  uint64_t acceptedCount() const { return listener_->accepted(); }
  /// Connections blocked in a WAIT now (for tests: a wait has reached the server).
  size_t waiterCount() const { return context_.waitingConnections(); }
  /// Keys held (TCPStore's GETNUMKEYS).
  int64_t keyCount() const { return context_.keyCount(); }
  /// Requests served since the server started.
  uint64_t requestsServed() const { return context_.requestsServed(); }
  /// Bytes buffered for all connections (for tests: the memory budget holds).
  uint64_t bufferedBytes() const { return context_.bufferedBytes(); }
  /// What the memory budget counts: stored data and buffers.
  uint64_t usedBytes() const { return context_.usedBytes(); }
  /// Reply bytes queued for sending since the server started (for tests: gone clients cost none).
  uint64_t replyBytesQueued() const { return context_.replyBytesQueued(); }

  /// Sets `key` as a client's SET would (waking the clients that wait for it). For the agent's own keys, e.g. the
  /// flight recorder's dump request. Call on the io_context's thread.
  void set(const std::string& key, std::string value);
  /// Adds `delta` to the counter `key` as a client's ADD would (waking the clients that wait for it); returns the
  /// sum, or nothing (and changes nothing) when `key` holds no integer. Call on the io_context's thread.
  std::optional<int64_t> add(const std::string& key, int64_t delta);
  /// COMPARE_SET as a client's would (waking the clients that wait for `key`); returns the value now stored (or
  /// `expected`'s answer: see TCPStore). Call on the io_context's thread.
  std::string compareSet(const std::string& key, const std::string& expected, std::string desired);
  /// The value of `key`, if set. Call on the io_context's thread.
  std::optional<std::string> get(const std::string& key) const;
  /// The keys, values and waiters, to read (ServedStore's wait); changes go through the methods above, which wake
  /// the waiters. Call on the io_context's thread.
  const KvState& state() const { return context_.state(); }
  /// Deletes `key` (nothing when absent). Call on the io_context's thread.
  void erase(const std::string& key);
  /// Tells `events` of every client's request, ADD and closed connection, on the io_context's thread. Call on that
  /// thread (or before it runs).
  void setClientEvents(ClientEvents events) { context_.setClientEvents(std::move(events)); }
  /// Deletes, before the next attempt, the root keys an attempt leaves behind that must not reach the next one:
  /// `rootKeys` as they sit in the store (the agent's dump request, "/exception_dump": torch's TCPStore client sends
  /// every key as "/" + key) and keys not starting with '/' (TCPStore's own "init/", other clients' raw keys).
  /// Never the workers' keys ("//worker/attempt_N/...": the agent store's PrefixStore under the client's "/"), the
  /// rendezvous' ("/ddprun.rdzv.<run>/...") or a user's own ("/name" from a plain TCPStore client, which torchrun
  /// keeps too). Returns how many went.
  size_t deleteRootKeys(const std::vector<std::string>& rootKeys);

 private:
  void admit(boost::asio::ip::tcp::socket socket, const boost::asio::ip::tcp::endpoint& peer);

  StoreServerOptions options_;
  /// What the connections share; declared before them, so it outlives them.
  StoreContext context_;
  /// The open connections.
  ConnectionManager connections_;
  /// Accepts (and pauses after EMFILE) for the connections above; declared after them, so it goes first.
  std::unique_ptr<TcpListener> listener_;
  bool stopped_ = false;
};

/// Raises the soft RLIMIT_NOFILE to the hard limit (a store serves one descriptor per client); returns the
/// soft limit in force afterwards.
uint64_t raiseOpenFileLimit();

}  // namespace ddprun::store
