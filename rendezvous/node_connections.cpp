#include "rendezvous/node_connections.hpp"

#include <memory>

#include "rendezvous/round_keys.hpp"
#include "store/store_server.hpp"

namespace ddprun::rendezvous {
namespace keys = round_keys;

std::optional<std::string> goneMarkFor(const std::string& aliveKey) {
  static const std::string kPrefix = "/ddprun.rdzv.";
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
  nodes_[connection] = *mark;
  if (marked_.erase(*mark) == 0) return std::nullopt;
  return mark;
}

std::optional<std::string> NodeConnections::onClose(uint64_t connection) {
  const auto it = nodes_.find(connection);
  if (it == nodes_.end()) return std::nullopt;
  std::string mark = std::move(it->second);
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
                          }});
}

}  // namespace ddprun::rendezvous
