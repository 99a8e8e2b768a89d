#include "worker/rank_replacement.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/error.hpp"
#include "worker/comm/make_communicator.hpp"
#include "worker/comm/store_bootstrap.hpp"
#include "worker/comm/tensor_broadcast.hpp"

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
  void markFormed() override { setAndConfirm(generationFormedKey(env_.commGeneration), "1"); }
  void markTimedOut(int rank) override {
    setAndConfirm(generationTimedOutKey(env_.commGeneration), std::to_string(rank));
  }

 private:
  /// SET has no reply: a CHECK after it returns once the store has served both, on this open connection. ddprun's
  /// store takes these keys only from a client whose socket is still open when it serves the write.
  void setAndConfirm(const std::string& key, const std::string& value) {
    attemptStore_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
    attemptStore_->check({key});
  }

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
  // Every rank's completed steps + 1 at its own index (0: a new rank), summed: all learn all.
  torch::Tensor steps = torch::zeros({comm.worldSize()}, torch::kInt64);
  steps[comm.rank()] = mine.completedSteps + 1;
  steps = steps.to(comm.device());
  comm.allreduceSum(steps);
  steps = steps.cpu();
  const auto* counts = steps.data_ptr<int64_t>();
  const int source = static_cast<int>(std::max_element(counts, counts + comm.worldSize()) - counts);  // lowest best
  if (counts[source] == 0) throw Error("no rank of the new group has a training state to send");
  const bool behind = mine.completedSteps != counts[source] - 1;
  std::vector<torch::Tensor> state = mine.tensors();
  if (!behind && comm.rank() != source) {
    // Takes part; keeps its own model state, takes the sender's position.
    for (size_t i = mine.positionTensors; i < state.size(); ++i) state[i] = state[i].detach().clone();
  }
  broadcastTensors(state, comm, source);
  if (comm.rank() != source) mine.loaded();
  return source;
}

}  // namespace ddprun::worker
