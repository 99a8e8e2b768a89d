#include "rendezvous/store_server.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>

#include "rendezvous/session.hpp"

namespace ddprun::rendezvous {
namespace asio = boost::asio;
using asio::ip::tcp;

namespace {
// Asio opens sockets without FD_CLOEXEC; processes the launcher spawns must not inherit the store's
// sockets (a worker would keep the port bound after ddprun is gone).
void closeOnExec(int fd) { ::fcntl(fd, F_SETFD, ::fcntl(fd, F_GETFD) | FD_CLOEXEC); }
}  // namespace

StoreServer::StoreServer(asio::io_context& io, const StoreServerOptions& options)
    : io_(io), options_(options), acceptor_(io), acceptPause_(io) {
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
  acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
    if (stopped_) return;
    if (ec && ec != asio::error::operation_aborted) {
      pauseAccepting(ec);
      return;
    }
    if (!ec) {
      acceptFailing_ = false;
      closeOnExec(socket.native_handle());
      auto session = std::make_shared<Session>(std::move(socket), nextId_++, *this);
      sessions_.emplace(session->id(), session);
      session->start();
    }
    accept();
  });
}

void StoreServer::pauseAccepting(const boost::system::error_code& ec) {
  if (!acceptFailing_) {
    spdlog::warn("store: accept failed: {} (pausing new connections; existing clients are served)", ec.message());
    acceptFailing_ = true;
  }
  acceptPause_.expires_after(std::chrono::milliseconds(100));
  acceptPause_.async_wait([this, alive = std::weak_ptr<int>(lifetime_)](const boost::system::error_code& waitEc) {
    if (waitEc || !alive.lock() || stopped_) return;
    accept();
  });
}

void StoreServer::wake(const KvState::Woken& sessions) {
  for (SessionId id : sessions) {
    auto it = sessions_.find(id);
    if (it != sessions_.end()) it->second->deliver(std::string(1, static_cast<char>(kStopWaiting)));
  }
}

void StoreServer::sessionClosed(SessionId id) {
  // Defer the erase: the session may be inside one of its own handlers right now.
  asio::post(io_, [this, id, alive = std::weak_ptr<int>(lifetime_)] {
    if (alive.lock()) sessions_.erase(id);
  });
}

void StoreServer::stop() {
  if (stopped_) return;
  stopped_ = true;
  boost::system::error_code ec;
  acceptor_.close(ec);
  acceptPause_.cancel();
  auto sessions = sessions_;
  for (auto& [id, session] : sessions) session->close("");
  sessions_.clear();
}

}  // namespace ddprun::rendezvous
