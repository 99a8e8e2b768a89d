#include "common/tcp_listener.hpp"

#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include "common/close_on_exec.hpp"

namespace ddprun {
namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

std::string describeEndpoint(const tcp::endpoint& endpoint) {
  const auto address = endpoint.address();
  const std::string host = address.is_v6() ? "[" + address.to_string() + "]" : address.to_string();
  return host + ":" + std::to_string(endpoint.port());
}

}  // namespace

TcpListener::TcpListener(asio::io_context& io, const tcp::endpoint& endpoint, Options options, OnAccept onAccept,
                         Describe describe)
    : options_(std::move(options)),
      onAccept_(std::move(onAccept)),
      describe_(std::move(describe)),
      acceptor_(io),
      acceptPause_(io) {
  boost::system::error_code ec;
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw ListenError(options_.what + ": cannot listen on " + describeEndpoint(endpoint) + ": " + ec.message());
  closeOnExec(acceptor_.native_handle());
  port_ = acceptor_.local_endpoint().port();
  accept();
}

TcpListener::~TcpListener() { stop(); }

tcp::endpoint TcpListener::localEndpoint() const {
  boost::system::error_code ec;
  return acceptor_.local_endpoint(ec);
}

void TcpListener::accept() {
  acceptor_.async_accept(
      acceptPeer_, [this, alive = std::weak_ptr<char>(lifetime_)](boost::system::error_code ec, tcp::socket socket) {
        if (alive.expired() || stopped_ || ec == asio::error::operation_aborted) return;
        if (ec) return pauseAccepting(ec);
        closeOnExec(socket.native_handle());
        ++accepted_;
        onAccept_(std::move(socket), acceptPeer_);
        if (!alive.expired() && !stopped_) accept();  // OnAccept may have stopped (or destroyed) the server
      });
}

void TcpListener::pauseAccepting(const boost::system::error_code& ec) {
  ++acceptFailures_;
  const auto now = std::chrono::steady_clock::now();
  if (now >= nextWarning_) {
    const bool outOfDescriptors = ec == asio::error::no_descriptors || ec.value() == ENFILE;
    rlimit limit{};
    ::getrlimit(RLIMIT_NOFILE, &limit);
    const std::string extra = describe_ ? describe_() : std::string();
    spdlog::warn(
        "{}: cannot accept new connections: {}{} ({} failed attempt(s) so far{}); existing connections are "
        "served, retrying every {} ms",
        options_.what, ec.message(),
        outOfDescriptors ? " (out of file descriptors: open-file limit " + std::to_string(limit.rlim_cur) + ")"
                         : std::string(),
        acceptFailures_, extra.empty() ? "" : ", " + extra, options_.retryAfter.count());
    nextWarning_ = now + options_.warnEvery;
  }
  acceptPause_.expires_after(options_.retryAfter);
  acceptPause_.async_wait([this, alive = std::weak_ptr<char>(lifetime_)](const boost::system::error_code& waitEc) {
    if (waitEc || alive.expired() || stopped_) return;
    accept();
  });
}

void TcpListener::stop() {
  if (stopped_) return;
  stopped_ = true;
  boost::system::error_code ec;
  acceptor_.close(ec);
  acceptPause_.cancel();
}

}  // namespace ddprun
