#pragma once
// The workers' store of the running round as the agent reaches it for rank replacement: in process when this agent
// serves it (a single node, or the node whose agent serves the round's store), else over TCP to the node that does.
// Only the operations the replacement's announcement (and its clean-up after a hang) needs.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "store/store_server.hpp"

namespace ddprun::launcher {

class WorkersStore {
 public:
  virtual ~WorkersStore() = default;
  /// Throw store errors (store_errors.hpp) when the store does not answer (the remote one only).
  virtual std::optional<std::string> get(const std::string& key) = 0;
  virtual void set(const std::string& key, const std::string& value) = 0;
  /// TCPStore's COMPARE_SET: returns the value stored afterwards (`desired` when it was set).
  virtual std::string compareSet(const std::string& key, const std::string& expected, const std::string& desired) = 0;
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  /// TCPStore's DELETE_KEY (a missing key is no error).
  virtual void erase(const std::string& key) = 0;
};

/// The store this agent serves; call on its loop (the operations are then atomic with every client's).
std::unique_ptr<WorkersStore> servedWorkersStore(store::StoreServer& server);
/// Another node's, at host:port; each call waits at most `timeout`.
std::unique_ptr<WorkersStore> remoteWorkersStore(const std::string& host, int port, std::chrono::milliseconds timeout);

}  // namespace ddprun::launcher
