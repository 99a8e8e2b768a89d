#pragma once
// torchrun's c10d/etcd dynamic rendezvous (PyTorch dynamic_rendezvous.py) over a RendezvousBackend: nodes
// join a round; once MIN are in, the round waits last_call_timeout for more (up to MAX) and closes; a node
// that arrives later queues in the wait list, which the running nodes see at their next monitor tick.
// Every change to the round is a compare-and-set of the whole state, retried on conflict.
#include <chrono>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "rendezvous/rendezvous_backend.hpp"
#include "rendezvous/rendezvous_handler.hpp"
#include "rendezvous/rendezvous_state.hpp"

namespace ddprun::rendezvous {

/// --nnodes and the --rdzv-conf timeouts (seconds in the flags, milliseconds here).
struct DynamicRendezvousSettings {
  std::string runId;
  RoundLimits limits;
  std::chrono::milliseconds joinTimeout{600000};
  std::chrono::milliseconds closeTimeout{30000};
  LivenessSettings liveness;
  bool hostsStore = false;  ///< this node serves the backend store: wait for the others in finish()
};

class DynamicRendezvous : public RendezvousHandler {
 public:
  DynamicRendezvous(std::unique_ptr<RendezvousBackend> backend, DynamicRendezvousSettings settings);

  RoundAssignment next(const NodeDescriptor& self, const std::atomic<bool>& cancel) override;
  Membership check() override;
  void keepAlive() noexcept override;
  void finish(NodeOutcome outcome, const std::atomic<bool>& cancel) override;
  std::string describe() const override;

 private:
  struct Synced {
    RendezvousState state;
    std::string token;
  };
  Synced sync();
  /// Writes `state` (bumping `writes`) if `token` is still current; false on a conflict.
  bool tryWrite(RendezvousState state, const std::string& token);
  /// Applies `change` to the freshest state until a write succeeds (or `change` declines by returning
  /// false).
  template <typename Change>
  void update(Change change);
  void keepAliveIfDue();
  /// Sanitises `synced` against dead nodes and writes the result; returns whether it wrote.
  bool dropDeadNodes(Synced& synced);
  void leaveRound();
  RoundAssignment join(const std::atomic<bool>& cancel);
  /// A backend error while joining: retried until join_timeout before the backend was ever reached,
  /// else under the lost-backend rule of check().
  void waitForBackend(const RendezvousBackendError& e, std::chrono::steady_clock::time_point joinDeadline);
  void logProgress(const RendezvousState& state, std::chrono::steady_clock::time_point& nextLog);
  void waitForOthersToFinish(const std::atomic<bool>& cancel);
  std::chrono::milliseconds pollDelay(const RendezvousState& state) const;
  /// Records contact with the backend; throws once it has been unreachable for the liveness expiry.
  void noteBackendFailure(const RendezvousBackendError& e);
  /// Records a successful exchange with the backend (and says so after an outage).
  void noteBackendContact();

  std::unique_ptr<RendezvousBackend> backend_;
  DynamicRendezvousSettings settings_;
  NodeDescriptor self_;
  std::optional<int64_t> joinedRound_;
  std::set<std::string> roundMembers_;
  std::chrono::steady_clock::time_point lastKeepAlive_{};
  std::chrono::steady_clock::time_point lastContact_ = std::chrono::steady_clock::now();
  bool backendUnreachable_ = false;
  bool reachedBackend_ = false;
  std::chrono::steady_clock::time_point nextWaitLog_{};  // one warning per outage, not one per monitor tick
};

}  // namespace ddprun::rendezvous
