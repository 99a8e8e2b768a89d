#pragma once
// torchrun's c10d/etcd dynamic rendezvous (PyTorch dynamic_rendezvous.py) over a RendezvousBackend: nodes
// join a round; once MIN are in, the round waits last_call_timeout for more (up to MAX) and closes; a node
// that arrives later queues in the wait list, which the running nodes see at their next monitor tick.
// Every change to the round is a compare-and-set of the whole state, retried on conflict. Each public call
// runs its operations (leave, join, close, exit barrier) through one executor against one deadline, as
// torch's _DistributedRendezvousOpExecutor.run(op, deadline) does; time comes from an injected Clock.
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "common/clock.hpp"
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
  bool hostsStore = false;                  ///< this node serves the backend store: wait for the others in finish()
  Clock* clock = &SystemClock::instance();  ///< time and sleep (a fake clock in tests)
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
  /// What an operation asks of the executor after looking at the freshest state.
  enum class Step {
    kDone,   ///< the operation is over
    kWait,   ///< nothing to do until the state changes (or a poll delay passes)
    kWrite,  ///< write the state the operation changed in place (a conflict re-reads and asks again)
  };
  /// One operation: decides from the synced state (changing it for kWrite) and the shared deadline;
  /// throws the rendezvous' errors (closed, timeout) itself.
  using Operation = std::function<Step(RendezvousState& state, const Deadline& deadline)>;
  /// How the executor treats an unreachable backend.
  enum class OnBackendError {
    kRetry,  ///< retry until the deadline (never reached yet) or the liveness expiry (lost mid-job)
    kThrow,  ///< let the error out at once
  };

  /// Runs `op` until it is done: sync (keep-alive, dead-node sweep), decide, write or wait, all against
  /// `deadline`. Throws RendezvousCancelled when `cancel` (if given) is set.
  void execute(const Operation& op, const Deadline& deadline, const std::atomic<bool>* cancel, OnBackendError onError);
  Synced sync();
  /// Writes `state` (bumping `writes`) if `token` is still current; false on a conflict.
  bool tryWrite(RendezvousState state, const std::string& token);
  void keepAliveIfDue();
  /// Sanitises `synced` against dead nodes and writes the result; returns whether it wrote.
  bool dropDeadNodes(Synced& synced);
  /// _RendezvousExitOp: leave the round (participant or wait list).
  Step leaveOp(RendezvousState& state) const;
  /// Leaves the round now (a stop while joining, a join that timed out, a stop); backend errors propagate.
  void leaveRound();
  /// _RendezvousJoinOp, until this node is in a complete round; returns its assignment.
  RoundAssignment join(const Deadline& deadline, const std::atomic<bool>& cancel);
  /// A backend error inside an operation: retried until `deadline` before the backend was ever reached,
  /// else under the lost-backend rule of check(). Sleeps before the retry.
  void waitForBackend(const RendezvousBackendError& e, const Deadline& deadline);
  void logProgress(const RendezvousState& state, Clock::TimePoint& nextLog);
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
  Clock& clock_;
  Clock::TimePoint lastKeepAlive_{};
  Clock::TimePoint lastContact_;
  bool backendUnreachable_ = false;
  bool reachedBackend_ = false;
  Clock::TimePoint nextWaitLog_{};  // one warning per outage, not one per monitor tick
};

}  // namespace ddprun::rendezvous
