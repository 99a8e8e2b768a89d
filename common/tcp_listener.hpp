#pragma once
// The skeleton both of ddprun's servers stand on (the TCPStore server and the status page): one listening
// socket on an Asio loop. It binds, listens, keeps its own and every accepted socket out of the workers
// (close-on-exec), and accepts until stop(); when accept fails for lack of descriptors it pauses instead
// of spinning, and says so at most once per interval. Its shape follows the Asio examples' `server`
// (an acceptor and a loop of async_accept), with the pause from Redis' acceptor (ae + anetAccept).
#include <boost/asio.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/error.hpp"

namespace ddprun {

/// The address cannot be bound or listened on; the message names `what` and the address.
class ListenError : public Error {
 public:
  using Error::Error;
};

class TcpListener {
 public:
  /// Called on the loop thread for each accepted connection, with the peer as accept saw it (a client that
  /// resets at once has no address left to ask for later).
  using OnAccept = std::function<void(boost::asio::ip::tcp::socket, const boost::asio::ip::tcp::endpoint& peer)>;
  /// What to add to the accept-failure warning (e.g. "12 open"); may be empty.
  using Describe = std::function<std::string()>;

  struct Options {
    std::string what;                             ///< names the server in errors and warnings ("store")
    std::chrono::milliseconds retryAfter{100};    ///< pause after a failed accept
    std::chrono::milliseconds warnEvery{10'000};  ///< at most one accept-failure warning per interval
  };

  /// Binds `endpoint` (SO_REUSEADDR), listens and starts accepting on `io`, which the caller runs on one
  /// thread. Throws ListenError ("<what>: cannot listen on <where>: <reason>").
  TcpListener(boost::asio::io_context& io, const boost::asio::ip::tcp::endpoint& endpoint, Options options,
              OnAccept onAccept, Describe describe = {});
  ~TcpListener();
  TcpListener(const TcpListener&) = delete;
  TcpListener& operator=(const TcpListener&) = delete;

  /// The bound port (the chosen one for port 0) and address.
  uint16_t port() const { return port_; }
  boost::asio::ip::tcp::endpoint localEndpoint() const;
  /// Connections accepted so far (handed to OnAccept).
  uint64_t accepted() const { return accepted_; }
  /// Closes the listening socket; no OnAccept afterwards. Idempotent; call on the loop thread.
  void stop();

 private:
  void accept();
  void pauseAccepting(const boost::system::error_code& ec);

  Options options_;
  OnAccept onAccept_;
  Describe describe_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::ip::tcp::endpoint acceptPeer_;  ///< the peer of the accept in progress (one at a time)
  boost::asio::steady_timer acceptPause_;
  uint16_t port_ = 0;
  uint64_t accepted_ = 0;
  uint64_t acceptFailures_ = 0;
  std::chrono::steady_clock::time_point nextWarning_{};
  bool stopped_ = false;
  /// Expires with the listener: a handler already queued when it is destroyed does nothing.
  std::shared_ptr<char> lifetime_ = std::make_shared<char>();
};

}  // namespace ddprun
