#include "worker/rank_replacement.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "common/error.hpp"
#include "worker/comm/make_communicator.hpp"
#include "worker/comm/store_bootstrap.hpp"

// Linking this file marks the program as supporting rank replacement (see the header).
__attribute__((section(".ddprun_rank_replace"), used)) static const char kRankReplaceMarker[] =
    "ddprun rank replacement v1";

namespace ddprun::worker {
namespace {

class StoreGroupReplacer : public GroupReplacer {
 public:
  StoreGroupReplacer(const DistEnv& env, const Placement& placement, std::chrono::milliseconds timeout)
      : env_(env), placement_(placement), timeout_(timeout), attemptStore_(connectAttemptStore(env, timeout)) {}

  std::unique_ptr<Communicator> nextGroup() override {
    const int next = env_.commGeneration + 1;
    try {
      attemptStore_->wait({generationKey(next)}, timeout_);
    } catch (const std::exception& e) {
      throw Error("ddprun announced no replacement rank (generation " + std::to_string(next) + ") within " +
                  std::to_string(timeout_.count() / 1000) + " s: " + firstLine(e.what()));
    }
    env_.commGeneration = next;
    return makeCommunicator(env_, placement_, timeout_);
  }
  int generation() const override { return env_.commGeneration; }
  void markFormed() override {
    attemptStore_->set(generationFormedKey(env_.commGeneration), std::vector<uint8_t>{'1'});
  }

 private:
  DistEnv env_;
  Placement placement_;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10d::Store> attemptStore_;
};

}  // namespace

std::unique_ptr<GroupReplacer> makeStoreGroupReplacer(const DistEnv& env, const Placement& placement,
                                                      std::chrono::milliseconds timeout) {
  return std::make_unique<StoreGroupReplacer>(env, placement, timeout);
}

int syncTrainingState(Communicator& comm, const StateSync& mine) {
  const torch::Device device = comm.device();
  // Every rank's completed steps + 1 at its own index (0: a new rank), summed: all learn all.
  torch::Tensor steps = torch::zeros({comm.worldSize()}, torch::kInt64);
  steps[comm.rank()] = mine.completedSteps + 1;
  steps = steps.to(device);
  comm.allreduceSum(steps);
  steps = steps.cpu();
  const auto* counts = steps.data_ptr<int64_t>();
  const int source =
      static_cast<int>(std::max_element(counts, counts + comm.worldSize()) - counts);  // lowest of the best
  if (counts[source] == 0) throw Error("no rank of the new group has a training state to send");
  const int64_t sourceSteps = counts[source] - 1;
  // The state as a checkpoint's bytes: its size first, then the bytes.
  std::string bytes = comm.rank() == source ? mine.encode() : std::string();
  torch::Tensor size = torch::full({1}, static_cast<int64_t>(bytes.size()), torch::kInt64).to(device);
  comm.broadcast(size, source);
  torch::Tensor payload = torch::empty({size.cpu().item<int64_t>()}, torch::kUInt8);
  if (comm.rank() == source) std::memcpy(payload.data_ptr(), bytes.data(), bytes.size());
  payload = payload.to(device);
  comm.broadcast(payload, source);
  if (mine.completedSteps != sourceSteps) {
    payload = payload.cpu();
    mine.load(std::string(static_cast<const char*>(payload.data_ptr()), static_cast<size_t>(payload.numel())));
  }
  return source;
}

}  // namespace ddprun::worker
