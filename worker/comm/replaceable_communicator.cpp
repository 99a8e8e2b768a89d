#include "worker/comm/replaceable_communicator.hpp"

namespace ddprun::worker {
namespace {

using Clock = std::chrono::steady_clock;

/// Runs `call`, part of a collective started at `started`; any error of the group becomes CollectiveFailed with
/// the same message, timed out when it came no sooner than `timeout` after the start.
template <typename Fn>
auto failedAsCollective(Clock::time_point started, std::chrono::milliseconds timeout, Fn&& call) {
  try {
    return call();
  } catch (const CollectiveFailed&) {
    throw;
  } catch (const std::exception& e) {
    throw CollectiveFailed(e.what(), Clock::now() - started >= timeout);
  }
}

class ReportingPending : public PendingCollective {
 public:
  ReportingPending(std::unique_ptr<PendingCollective> inner, Clock::time_point started,
                   std::chrono::milliseconds timeout)
      : inner_(std::move(inner)), started_(started), timeout_(timeout) {}
  void wait() override {
    failedAsCollective(started_, timeout_, [&] { inner_->wait(); });
  }

 private:
  std::unique_ptr<PendingCollective> inner_;
  Clock::time_point started_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

void ReplaceableCommunicator::leave(const std::string& reason) {
  if (!group_) return;
  group_->abandon(reason);
  group_.reset();
}

std::unique_ptr<PendingCollective> ReplaceableCommunicator::allreduceSumAsync(torch::Tensor& tensor) {
  const auto started = Clock::now();
  return failedAsCollective(started, timeout_, [&]() -> std::unique_ptr<PendingCollective> {
    return std::make_unique<ReportingPending>(group_->allreduceSumAsync(tensor), started, timeout_);
  });
}

void ReplaceableCommunicator::broadcast(torch::Tensor& tensor, int root) {
  failedAsCollective(Clock::now(), timeout_, [&] { group_->broadcast(tensor, root); });
}

void ReplaceableCommunicator::barrier() {
  failedAsCollective(Clock::now(), timeout_, [&] { group_->barrier(); });
}

}  // namespace ddprun::worker
