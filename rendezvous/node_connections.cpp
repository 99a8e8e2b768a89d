#include "rendezvous/node_connections.hpp"

#include <chrono>
#include <cstdio>
#include <memory>
#include <random>

#include "rendezvous/round_keys.hpp"
#include "store/store_server.hpp"

namespace ddprun::rendezvous {
namespace keys = round_keys;

std::optional<std::string> goneMarkFor(const std::string& aliveKey) {
  static const std::string kPrefix = keys::prefix("");
  const std::string alive = "/" + keys::alive("");  // "/alive/"
  if (aliveKey.rfind(kPrefix, 0) != 0) return std::nullopt;
  // The run id may contain '/' (node ids do not), and the node id may not be empty: the last "/alive/".
  const size_t last = aliveKey.rfind(alive);
  if (last == std::string::npos || last < kPrefix.size() || last + alive.size() >= aliveKey.size()) {
    return std::nullopt;
  }
  const std::string node = aliveKey.substr(last + alive.size());
  return aliveKey.substr(0, last) + "/" + keys::gone(node);
}

std::optional<std::string> NodeConnections::onAdd(uint64_t connection, const std::string& key) {
  auto mark = goneMarkFor(key);
  if (!mark) return std::nullopt;
  nodes_[connection] = Node{*mark, key};
  if (marked_.erase(*mark) == 0) return std::nullopt;
  return mark;
}

const std::string* NodeConnections::onRequest(uint64_t connection) const {
  const auto it = nodes_.find(connection);
  return it == nodes_.end() ? nullptr : &it->second.aliveKey;
}

std::optional<std::string> NodeConnections::onClose(uint64_t connection) {
  const auto it = nodes_.find(connection);
  if (it == nodes_.end()) return std::nullopt;
  std::string mark = std::move(it->second.goneMark);
  nodes_.erase(it);
  marked_.insert(mark);
  return mark;
}

void watchNodeConnections(store::StoreServer& server) {
  auto nodes = std::make_shared<NodeConnections>();
  server.setClientEvents({[nodes, &server](store::ConnectionId id, const std::string& key) {
                            if (auto mark = nodes->onAdd(id, key))
                              server.erase(*mark);  // heartbeating (again, after a reconnect)
                          },
                          [nodes, &server](store::ConnectionId id) {
                            if (auto mark = nodes->onClose(id)) server.set(*mark, "1");
                          },
                          [nodes, &server](store::ConnectionId id) {
                            if (const std::string* alive = nodes->onRequest(id)) server.add(*alive, 1);
                          }});
}

void writeStoreId(store::StoreServer& server, const std::string& runId) {
  std::random_device entropy;
  const uint64_t id = (static_cast<uint64_t>(entropy()) << 32) ^ entropy() ^
                      static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(id));
  server.set(keys::prefix(runId) + "/" + keys::storeId(), text);
}

}  // namespace ddprun::rendezvous
