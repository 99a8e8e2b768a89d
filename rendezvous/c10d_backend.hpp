#pragma once
// The rendezvous backend on ddprun's own store (--rdzv-backend c10d), as PyTorch's C10dRendezvousBackend
// (torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py) keeps it on a TCPStore: the state under
// one key, changed with COMPARE_SET. Unlike PyTorch it also bumps a version counter and sets one marker key
// per version, so waiting nodes block in WAIT on the next marker instead of polling every second; and
// liveness is a heartbeat counter per node, judged by each observer's own clock (no clock skew).
#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "common/clock.hpp"
#include "rendezvous/rendezvous_backend.hpp"
#include "store/prefix_store.hpp"

namespace ddprun::rendezvous {

class C10dRendezvousBackend : public RendezvousBackend {
 public:
  /// Keys live under "/ddprun.rdzv.<runId>/" in `store`; `clock` judges heartbeat ages. Store errors
  /// surface as RendezvousBackendError (RendezvousCancelled for a cancelled connect).
  C10dRendezvousBackend(std::shared_ptr<store::Store> store, const std::string& runId, LivenessSettings liveness,
                        Clock& clock = SystemClock::instance());

  std::string describe() const override { return store_.describe(); }
  /// GET "state"; the value is its own version token (a state never repeats).
  State getState() override;
  /// COMPARE_SET on "state", then ADD "version" and SET "changed/<version>" to wake the waiters.
  std::pair<State, bool> setState(const std::string& value, const std::string& token) override;
  /// WAIT for the next "changed/<version>" marker unless the state already differs from `token`.
  void waitForChange(const std::string& token, std::chrono::milliseconds timeout) override;
  /// ADD 1 to the node's heartbeat counter.
  void keepAlive(const std::string& nodeId) override;
  /// The nodes whose counter has not moved for the liveness expiry, judged by this node's own clock.
  std::vector<std::string> deadNodes(const std::vector<std::string>& nodeIds) override;
  /// Nothing to undo: a counter that stops moving is a dead node's.
  void retire(const std::string& nodeId) noexcept override;

 private:
  struct Heartbeat {
    std::string counter;
    Clock::TimePoint changedAt;
  };

  store::PrefixStore store_;
  LivenessSettings liveness_;
  Clock& clock_;
  std::map<std::string, Heartbeat> heartbeats_;
};

}  // namespace ddprun::rendezvous
