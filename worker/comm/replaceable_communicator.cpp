#include "worker/comm/replaceable_communicator.hpp"

namespace ddprun::worker {
namespace {

/// Runs `call`; any error of the group becomes CollectiveFailed with the same message.
template <typename Fn>
auto failedAsCollective(Fn&& call) {
  try {
    return call();
  } catch (const CollectiveFailed&) {
    throw;
  } catch (const std::exception& e) {
    throw CollectiveFailed(e.what());
  }
}

class ReportingPending : public PendingCollective {
 public:
  explicit ReportingPending(std::unique_ptr<PendingCollective> inner) : inner_(std::move(inner)) {}
  void wait() override {
    failedAsCollective([&] { inner_->wait(); });
  }

 private:
  std::unique_ptr<PendingCollective> inner_;
};

}  // namespace

void ReplaceableCommunicator::leave(const std::string& reason) {
  if (!group_) return;
  group_->abandon(reason);
  group_.reset();
}

std::unique_ptr<PendingCollective> ReplaceableCommunicator::allreduceSumAsync(torch::Tensor& tensor) {
  return failedAsCollective([&]() -> std::unique_ptr<PendingCollective> {
    return std::make_unique<ReportingPending>(group_->allreduceSumAsync(tensor));
  });
}

void ReplaceableCommunicator::broadcast(torch::Tensor& tensor, int root) {
  failedAsCollective([&] { group_->broadcast(tensor, root); });
}

void ReplaceableCommunicator::barrier() {
  failedAsCollective([&] { group_->barrier(); });
}

}  // namespace ddprun::worker
