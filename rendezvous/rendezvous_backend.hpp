#pragma once
// Where the shared state of a dynamic rendezvous lives, and how nodes prove they are alive. The design
// follows PyTorch's RendezvousBackend (torch/distributed/elastic/rendezvous/dynamic_rendezvous.py and
// c10d_rendezvous_backend.py): the whole round state is one value, changed only by compare-and-set, so
// concurrent joins can never corrupt it. Liveness is kept outside that value (a counter per node in the
// store, a lease per node in etcd), so heartbeats never contend with joins.
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "common/error.hpp"

namespace ddprun::rendezvous {

/// The backend cannot be reached or answered badly; the message names the backend and the operation.
class RendezvousBackendError : public Error {
 public:
  using Error::Error;
};

/// Timing of liveness: a node that has not shown life for interval × maxAttempts is dead.
struct LivenessSettings {
  std::chrono::milliseconds interval{5000};  ///< keep_alive_interval
  int maxAttempts = 3;                       ///< keep_alive_max_attempt
  std::chrono::milliseconds expiry() const { return interval * maxAttempts; }
};

/// Every method blocks (each with a bounded timeout) and throws RendezvousBackendError on failure.
/// One instance is used by one thread.
class RendezvousBackend {
 public:
  /// A version of the state: `value` is empty when no state exists yet; `token` identifies this version
  /// for setState (opaque to callers).
  struct State {
    std::optional<std::string> value;
    std::string token;
  };

  virtual ~RendezvousBackend() = default;

  /// For messages: "c10d store at host:port", "etcd-v3 at host:port".
  virtual std::string describe() const = 0;

  /// Reads the current state.
  virtual State getState() = 0;

  /// Writes `value` if the stored state is still the version `token` names (the token of a State whose
  /// value was empty means "only if no state exists"). Returns the state stored afterwards and whether
  /// `value` was written.
  virtual std::pair<State, bool> setState(const std::string& value, const std::string& token) = 0;

  /// Blocks until the state may have changed from the version `token` names, or `timeout` passes.
  /// Spurious returns are allowed; callers re-read the state.
  virtual void waitForChange(const std::string& token, std::chrono::milliseconds timeout) = 0;

  /// Announces that `nodeId` is alive; call at least every LivenessSettings::interval.
  virtual void keepAlive(const std::string& nodeId) = 0;

  /// Of `nodeIds`, those that have shown no life for LivenessSettings::expiry().
  virtual std::vector<std::string> deadNodes(const std::vector<std::string>& nodeIds) = 0;

  /// Withdraws `nodeId`'s liveness record (a clean exit). Never throws.
  virtual void retire(const std::string& nodeId) noexcept = 0;
};

}  // namespace ddprun::rendezvous
