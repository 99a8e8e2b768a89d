#pragma once
// ddprun's rendezvous store: a single-threaded Boost.Asio TCP server that speaks PyTorch's TCPStore
// wire protocol (1.13 and 2.x dialects, told apart per connection), so stock LibTorch and Python
// torch.distributed clients work against it. Every message size is bounded; a malformed or oversized
// message closes that connection only; a slow or silent client never blocks the others.
#include <boost/asio.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "common/error.hpp"
#include "rendezvous/kv_state.hpp"
#include "rendezvous/request_parser.hpp"

namespace ddprun::rendezvous {

/// Binding and limits.
struct StoreServerOptions {
  std::string host = "0.0.0.0";  ///< address to bind ("127.0.0.1" for --standalone)
  uint16_t port = 0;             ///< 0: a free port, see StoreServer::port()
  Limits limits;
  /// A client whose unsent replies exceed this is not reading; it is disconnected.
  uint64_t maxPendingReplyBytes = 256ull * 1024 * 1024;
};

/// A bind or listen failure (address in use, bad address), naming the address.
class StoreBindError : public Error {
 public:
  using Error::Error;
};

class Session;

class StoreServer {
 public:
  /// Binds and starts accepting on `io` (run by the caller, on one thread). Throws StoreBindError.
  StoreServer(boost::asio::io_context& io, const StoreServerOptions& options);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  /// The bound port (useful with port 0).
  uint16_t port() const { return port_; }
  const std::string& host() const { return options_.host; }

  /// Closes the listener and every connection. Call on the io_context's thread (or post it).
  void stop();

  /// Open connections (for tests and logs).
  size_t connectionCount() const { return sessions_.size(); }

  // Used by sessions.
  KvState& state() { return state_; }
  const StoreServerOptions& options() const { return options_; }
  void wake(const KvState::Woken& sessions);
  void sessionClosed(SessionId id);

 private:
  void accept();
  /// After a failed accept (EMFILE, ENFILE, …): log once per burst and retry after a pause instead of
  /// spinning.
  void pauseAccepting(const boost::system::error_code& ec);

  boost::asio::io_context& io_;
  StoreServerOptions options_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer acceptPause_;
  bool acceptFailing_ = false;
  uint16_t port_ = 0;
  KvState state_;
  std::unordered_map<SessionId, std::shared_ptr<Session>> sessions_;
  SessionId nextId_ = 1;
  bool stopped_ = false;
  std::shared_ptr<int> lifetime_ = std::make_shared<int>(0);  // posted handlers check it is alive
};

}  // namespace ddprun::rendezvous
