#pragma once
// The rendezvous backends ddprun knows, in one table (torch's rendezvous/registry.py): validation and the
// rendezvous session look a backend up here instead of comparing its name in many places.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/cancel_flag.hpp"

namespace ddprun::rendezvous {

class RendezvousHandler;
struct DynamicRendezvousSettings;

/// What a dynamic backend is built from (the endpoint and --rdzv-conf).
struct BackendParams {
  std::string host;
  uint16_t port = 0;
  std::string runId;
  std::chrono::milliseconds readTimeout{60000};   ///< each call to the backend
  std::chrono::milliseconds joinTimeout{600000};  ///< how long to keep trying to reach it at first
  const CancelFlag* cancel = nullptr;             ///< makes a connect in progress give up
};

/// Builds a dynamic rendezvous on its backend; throws rendezvous or store errors when it cannot.
using MakeRendezvous = std::unique_ptr<RendezvousHandler> (*)(const BackendParams&, const DynamicRendezvousSettings&);

/// One backend's facts.
struct RendezvousBackendInfo {
  const char* name;      ///< as given to --rdzv-backend
  int defaultPort;       ///< when --rdzv-endpoint has none
  bool dynamic;          ///< elastic rounds (MIN:MAX nodes) rather than fixed node ranks
  bool storeAtEndpoint;  ///< a node (the one at the endpoint) serves ddprun's store there
  MakeRendezvous make;   ///< nullptr for static (node 0's store, fixed node ranks)
};

/// The backend called `name`, or nullptr. Throws ConfigError for a name ddprun knows it does not support
/// (etcd's v2 API), saying what to use instead.
const RendezvousBackendInfo* findRendezvousBackend(const std::string& name);

/// "static, c10d or etcd-v3", for messages.
std::string rendezvousBackendNames();

}  // namespace ddprun::rendezvous
