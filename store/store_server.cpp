#include "store/store_server.hpp"

#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include "common/close_on_exec.hpp"
#include "store/store_connection.hpp"

namespace ddprun::store {
namespace asio = boost::asio;
using asio::ip::tcp;

namespace {
constexpr auto kAcceptRetry = std::chrono::milliseconds(100);
constexpr auto kAcceptLogInterval = std::chrono::seconds(10);
}  // namespace

uint64_t raiseOpenFileLimit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  return static_cast<uint64_t>(limit.rlim_cur);
}

StoreServer::StoreServer(asio::io_context& io, const StoreServerOptions& options)
    : options_(options), acceptor_(io), acceptPause_(io), connections_(io, options.limits) {
  raiseOpenFileLimit();
  const std::string where = options.host + ":" + std::to_string(options.port);
  boost::system::error_code ec;
  auto address = asio::ip::make_address(options.host, ec);
  if (ec) throw StoreBindError("store: cannot bind " + where + ": not an IP address (" + ec.message() + ")");
  tcp::endpoint endpoint(address, options.port);
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw StoreBindError("store: cannot listen on " + where + ": " + ec.message());
  port_ = acceptor_.local_endpoint().port();
  closeOnExec(acceptor_.native_handle());
  accept();
}

StoreServer::~StoreServer() { stop(); }

void StoreServer::accept() {
  // The peer's address comes from accept itself: a client that resets at once has none to ask for later.
  acceptor_.async_accept(acceptPeer_, [this](boost::system::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || stopped_) return;
    if (ec) {
      pauseAccepting(ec);
      return;
    }
    closeOnExec(socket.native_handle());
    const std::string peer = acceptPeer_.address().to_string() + ":" + std::to_string(acceptPeer_.port());
    connections_.start(
        std::make_shared<StoreConnection>(std::move(socket), connections_.nextId(), connections_, peer));
    accept();
  });
}

void StoreServer::pauseAccepting(const boost::system::error_code& ec) {
  ++acceptFailures_;
  const auto now = std::chrono::steady_clock::now();
  if (now >= nextAcceptLog_) {
    const bool outOfDescriptors = ec == asio::error::no_descriptors || ec.value() == ENFILE;
    rlimit limit{};
    ::getrlimit(RLIMIT_NOFILE, &limit);
    spdlog::warn("store: cannot accept new connections: {}{} ({} failed attempt(s) so far, {} open); existing "
                 "connections are served, retrying every {} ms",
                 ec.message(),
                 outOfDescriptors ? " (out of file descriptors: open-file limit " + std::to_string(limit.rlim_cur) + ")"
                                  : std::string(),
                 acceptFailures_, connections_.connectionCount(), kAcceptRetry.count());
    nextAcceptLog_ = now + kAcceptLogInterval;
  }
  acceptPause_.expires_after(kAcceptRetry);
  acceptPause_.async_wait([this, alive = std::weak_ptr<char>(lifetime_)](const boost::system::error_code& waitEc) {
    if (waitEc || alive.expired() || stopped_) return;
    accept();
  });
}

void StoreServer::set(const std::string& key, std::string value) {
  KvState::Woken woken;
  connections_.state().set(key, std::move(value), woken);
  connections_.wake(woken);
}

size_t StoreServer::deleteRootKeys() {
  size_t deleted = 0;
  for (const auto& key : connections_.state().listKeys()) {
    if (!key.empty() && key.front() == '/') continue;
    deleted += connections_.state().deleteKey(key) ? 1 : 0;
  }
  return deleted;
}

void StoreServer::stop() {
  if (stopped_) return;
  stopped_ = true;
  boost::system::error_code ec;
  acceptor_.close(ec);
  acceptPause_.cancel();
  connections_.stopAll();
}

}  // namespace ddprun::store
