#include "launcher/status/status_server.hpp"

#include <spdlog/spdlog.h>

#include "launcher/status/http_connection.hpp"

namespace ddprun::status {
namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

/// The address to bind: `host` as an IP address (IPv6 possibly in brackets), else its first resolution.
tcp::endpoint bindEndpoint(asio::io_context& io, std::string host, uint16_t port, const std::string& where) {
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  boost::system::error_code ec;
  asio::ip::address address = asio::ip::make_address(host, ec);
  if (!ec) return {address, port};
  tcp::resolver resolver(io);
  auto results = resolver.resolve(host, std::to_string(port), tcp::resolver::passive, ec);
  if (ec || results.empty()) {
    throw StatusBindError("status page: cannot listen on " + where + ": host does not resolve (" +
                          (ec ? ec.message() : "no address") + ")");
  }
  return results.begin()->endpoint();
}

/// Tells a connection over the ceiling to come back later, without waiting for it: a fresh socket's send
/// buffer is empty, so a non-blocking write of a few bytes completes or fails at once.
void refuse(tcp::socket socket) {
  static constexpr std::string_view kBusy =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 34\r\n"
      "Retry-After: 1\r\nConnection: close\r\n\r\ntoo many connections to the agent\n";
  boost::system::error_code ec;
  socket.non_blocking(true, ec);
  socket.write_some(asio::buffer(kBusy), ec);
  socket.shutdown(tcp::socket::shutdown_both, ec);
  socket.close(ec);
}

}  // namespace

StatusServer::StatusServer(asio::io_context& io, StatusServerOptions options, SnapshotSource snapshot)
    : options_(std::move(options)), snapshot_(std::move(snapshot)) {
  const std::string where = options_.host + ":" + std::to_string(options_.port);
  tcp::endpoint endpoint = bindEndpoint(io, options_.host, options_.port, where);
  try {
    listener_ =
        std::make_unique<TcpListener>(io, endpoint, TcpListener::Options{"status page"},
                                      [this](tcp::socket socket, const tcp::endpoint&) { admit(std::move(socket)); });
  } catch (const ListenError& e) {
    throw StatusBindError(e.what());
  }
}

StatusServer::~StatusServer() { stop(); }

std::string StatusServer::url() const {
  asio::ip::address address = listener_->localEndpoint().address();
  std::string host = address.is_v6() ? "[" + address.to_string() + "]" : address.to_string();
  return "http://" + host + ":" + std::to_string(listener_->port()) + "/";
}

StatusResponse StatusServer::answer(std::string_view method, std::string_view target) const {
  if (target.rfind("/status.json", 0) == 0) {
    ++statusRequests_;
    lastStatusRequest_ = std::chrono::steady_clock::now();
  }
  return handleStatusRequest(method, target, snapshot_);
}

void StatusServer::admit(tcp::socket socket) {
  if (connections_.size() >= options_.maxConnections && !evictLongestWaiting()) {
    spdlog::debug("status page: refused a connection ({} open, all answering)", connections_.size());
    return refuse(std::move(socket));
  }
  auto connection = std::make_shared<HttpConnection>(std::move(socket), nextId_++, *this);
  connections_.emplace(connection->id(), connection);
  connection->start();
}

bool StatusServer::evictLongestWaiting() {
  std::shared_ptr<HttpConnection> oldest;
  for (auto& [id, weak] : connections_) {
    auto connection = weak.lock();
    if (connection && connection->waiting() && (!oldest || connection->waitingSince() < oldest->waitingSince())) {
      oldest = connection;
    }
  }
  if (!oldest) return false;
  oldest->close();
  return true;
}

void StatusServer::stop() {
  if (stopped_) return;
  stopped_ = true;
  listener_->stop();
  auto connections = connections_;  // close() erases from connections_
  for (auto& [id, weak] : connections) {
    if (auto connection = weak.lock()) connection->close();
  }
  connections_.clear();
}

}  // namespace ddprun::status
