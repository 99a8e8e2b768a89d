#include "store/connection_manager.hpp"

#include <algorithm>

#include "store/store_connection.hpp"

namespace ddprun::store {
namespace asio = boost::asio;

ConnectionManager::ConnectionManager(asio::io_context& io, const StoreLimits& limits)
    : limits_(limits), sweepTimer_(io) {}

ConnectionManager::~ConnectionManager() { stopAll(); }

void ConnectionManager::start(std::shared_ptr<StoreConnection> connection) {
  auto& slot = connections_[connection->id()];
  slot = std::move(connection);
  slot->start();
  if (!sweeping_ && !stopped_) scheduleSweep();
}

void ConnectionManager::remove(ConnectionId id) { connections_.erase(id); }

void ConnectionManager::stopAll() {
  if (stopped_) return;
  stopped_ = true;
  sweepTimer_.cancel();
  auto connections = connections_;  // each close() removes itself from the map
  for (auto& [id, connection] : connections) connection->close("");
  connections_.clear();
}

void ConnectionManager::wake(const KvState::Woken& woken) {
  for (ConnectionId id : woken) {
    auto it = connections_.find(id);
    if (it == connections_.end()) continue;
    auto connection = it->second;  // sending may close it and drop the map's reference
    connection->sendStopWaiting();
  }
}

void ConnectionManager::scheduleSweep() {
  // Often enough that a stuck connection goes within about 1.25 timeouts, at most once a second; and only while there
  // are connections: an agent's workers' store has none until its workers start, and a thousand agents waiting for a
  // rendezvous on one host each woke every second for nothing.
  sweeping_ = true;
  const auto period = std::clamp<uint64_t>(std::min(limits_.requestTimeoutMs, limits_.replyTimeoutMs) / 4, 10, 1000);
  sweepTimer_.expires_after(std::chrono::milliseconds(period));
  sweepTimer_.async_wait([this, alive = std::weak_ptr<char>(lifetime_)](const boost::system::error_code& ec) {
    if (ec || alive.expired() || stopped_) return;
    sweep();
    if (connections_.empty()) {
      sweeping_ = false;  // the next connection starts it again
      return;
    }
    scheduleSweep();
  });
}

void ConnectionManager::sweep() {
  const auto now = std::chrono::steady_clock::now();
  const auto timeout = std::chrono::milliseconds(limits_.requestTimeoutMs);
  const auto replyTimeout = std::chrono::milliseconds(limits_.replyTimeoutMs);
  std::vector<std::shared_ptr<StoreConnection>> stuck, unread;
  for (const auto& [id, connection] : connections_) {
    auto since = connection->inRequestSince();
    if (since && now - *since >= timeout) stuck.push_back(connection);
    auto unreadSince = connection->unreadSince();
    if (unreadSince && now - *unreadSince >= replyTimeout) unread.push_back(connection);
  }
  for (auto& connection : stuck) {
    connection->close(
        "sat inside an incomplete request for more than " + std::to_string(limits_.requestTimeoutMs) + " ms",
        "request-timeout-ms");
  }
  for (auto& connection : unread) {
    connection->close("took none of its " + std::to_string(connection->unsentBytes()) + " unsent reply bytes for " +
                          std::to_string(limits_.replyTimeoutMs) + " ms; releasing them",
                      "reply-timeout-ms");
  }
}

}  // namespace ddprun::store
