#pragma once
// What every dynamic rendezvous backend shares: how its failures surface and how nodes prove they are alive.
// Liveness is a heartbeat counter per node, judged by an observer's own clock (no clock skew matters), as
// torch's dynamic rendezvous keeps last_heartbeats (torch/distributed/elastic/rendezvous/dynamic_rendezvous.py).
#include <chrono>

#include "common/error.hpp"

namespace ddprun::rendezvous {

/// The backend cannot be reached or answered badly; the message names the backend and the operation.
class RendezvousBackendError : public Error {
 public:
  using Error::Error;
};

/// Timing of liveness: a node that has not shown life for interval x maxAttempts is dead.
struct LivenessSettings {
  std::chrono::milliseconds interval{5000};  ///< keep_alive_interval
  int maxAttempts = 3;                       ///< keep_alive_max_attempt
  std::chrono::milliseconds expiry() const { return interval * maxAttempts; }
};

}  // namespace ddprun::rendezvous
