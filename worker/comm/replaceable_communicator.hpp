#pragma once
// A communicator whose group can be replaced while training goes on (ddprun --restart-scope rank): the trainer
// and the gradient reducer hold this one object; when a peer fails, every call that fails is reported as
// CollectiveFailed, and replace() swaps in the next generation's group of the same ranks.
#include <chrono>
#include <memory>

#include "common/error.hpp"
#include "worker/comm/communicator.hpp"

namespace ddprun::worker {

/// A collective failed because the group did (a peer died, a connection broke, or it ran past the timeout): the
/// step in flight is lost, but the caller's state as of the last completed step is intact.
class CollectiveFailed : public Error {
 public:
  CollectiveFailed(const std::string& what, bool timedOut) : Error(what), timedOut_(timedOut) {}
  /// The collective failed no sooner than the group's timeout after it started: no peer was lost (a lost peer
  /// breaks the group within milliseconds), one is stopped, hung or unreachable, and no replacement will come.
  bool timedOut() const { return timedOut_; }

 private:
  bool timedOut_;
};

class ReplaceableCommunicator : public Communicator {
 public:
  /// `timeout`: the group's collective timeout, to tell a collective that timed out from one a lost peer broke.
  ReplaceableCommunicator(std::unique_ptr<Communicator> group, std::chrono::milliseconds timeout)
      : group_(std::move(group)), timeout_(timeout) {}

  /// Leaves the failed group: tells its peers (Communicator::abandon) and destroys it, so that every rank of the
  /// job, on this node or another, sees the failure at once and its threads and connections are gone before the
  /// next generation forms. No call but replace() may follow.
  void leave(const std::string& reason);
  /// The next generation's group (same rank and world size), after leave().
  void replace(std::unique_ptr<Communicator> next) { group_ = std::move(next); }

  int rank() const override { return group_->rank(); }
  int worldSize() const override { return group_->worldSize(); }
  std::string backendName() const override { return group_->backendName(); }
  bool formsGroup() const override { return group_->formsGroup(); }
  torch::Device device() const override { return group_->device(); }
  /// As the group's, but a failure (at the start or in wait()) is thrown as CollectiveFailed.
  std::unique_ptr<PendingCollective> allreduceSumAsync(torch::Tensor& tensor) override;
  void broadcast(torch::Tensor& tensor, int root) override;
  void barrier() override;

 private:
  std::unique_ptr<Communicator> group_;
  std::chrono::milliseconds timeout_;
};

}  // namespace ddprun::worker
