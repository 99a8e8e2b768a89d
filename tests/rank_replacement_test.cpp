// The rank-replacement protocol's state exchange (worker/rank_replacement.hpp, step 4) with the ranks as threads
// over an in-memory communicator (support/thread_ranks.hpp): which rank sends, who takes its state and who keeps its
// own, and a broadcast that is exact for every dtype. The whole trainer's state (model, momentum, progress,
// generator) is checked end to end by ddprun_worker_test's rank replacement (bit-identical final parameters).
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "support/thread_ranks.hpp"
#include "worker/comm/tensor_broadcast.hpp"
#include "worker/rank_replacement.hpp"

namespace ddprun::worker {
namespace {

using test::spawnRanks;
using test::ThreadCommunicator;
using test::ThreadGroup;

TEST(RankReplacement, TheLowestRankFurthestAlongSendsOnlyRanksBehindItTakeItsModelAndEveryRankTakesItsPosition) {
  // Rank 2 is new; rank 0 abandoned step 41 (its collective failed first), ranks 1 and 3 completed it. Each rank's
  // state holds its own rank number, so who took whose state shows. The first tensor is the rank's position (as the
  // trainer's progress header: ranks at one step can stand on either side of an epoch's end), which all take.
  const std::vector<int64_t> steps{40, 41, -1, 41};
  ThreadGroup group(4);
  std::mutex mutex;
  std::vector<int> sources(4, -1);
  std::vector<int64_t> positions(4);
  std::vector<float> weights(4);
  std::vector<int64_t> counters(4);
  std::vector<bool> loaded(4, false);
  spawnRanks(4, [&](int rank) {
    ThreadCommunicator comm(group, rank);
    torch::Tensor position = torch::full({2}, static_cast<int64_t>(rank), torch::kInt64);
    torch::Tensor weight = torch::full({3, 2}, static_cast<float>(rank));
    torch::Tensor counter = torch::full({1}, static_cast<int64_t>(rank), torch::kInt64);
    StateSync mine;
    mine.completedSteps = steps[static_cast<size_t>(rank)];
    mine.tensors = [&] { return std::vector<torch::Tensor>{position, weight, counter}; };
    mine.positionTensors = 1;
    bool tookState = false;
    mine.loaded = [&] { tookState = true; };
    const int source = syncTrainingState(comm, mine);
    std::lock_guard<std::mutex> lock(mutex);
    sources[static_cast<size_t>(rank)] = source;
    positions[static_cast<size_t>(rank)] = position.max().item<int64_t>();
    weights[static_cast<size_t>(rank)] = weight.max().item<float>();
    counters[static_cast<size_t>(rank)] = counter.item<int64_t>();
    loaded[static_cast<size_t>(rank)] = tookState;
  });
  EXPECT_EQ(sources, (std::vector<int>{1, 1, 1, 1}));
  EXPECT_EQ(positions, (std::vector<int64_t>{1, 1, 1, 1})) << "every rank goes on from the sender's position";
  EXPECT_EQ(weights, (std::vector<float>{1, 1, 1, 3})) << "ranks at the sender's step keep their own model state";
  EXPECT_EQ(counters, (std::vector<int64_t>{1, 1, 1, 3}));
  EXPECT_EQ(loaded, (std::vector<bool>{true, false, true, true}));
}

TEST(RankReplacement, AGroupWithNoStateAnywhereIsAnErrorOnEveryRank) {
  ThreadGroup group(2);
  std::atomic<int> failures{0};
  spawnRanks(2, [&](int rank) {
    ThreadCommunicator comm(group, rank);
    StateSync fresh;
    fresh.tensors = [] { return std::vector<torch::Tensor>{}; };
    fresh.loaded = [] {};
    try {
      syncTrainingState(comm, fresh);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("no rank of the new group has a training state"), std::string::npos);
      ++failures;
    }
  });
  EXPECT_EQ(failures.load(), 2);
}

TEST(RankReplacement, BroadcastTensorsIsExactForEveryDtype) {
  // One concatenation would promote int64 to float and lose 2^53 + 1; one collective per dtype does not.
  ThreadGroup group(2);
  std::vector<std::vector<torch::Tensor>> got(2);
  spawnRanks(2, [&](int rank) {
    ThreadCommunicator comm(group, rank);
    const int64_t big = (int64_t{1} << 53) + 1;
    std::vector<torch::Tensor> state{
        torch::full({2}, rank == 1 ? big : int64_t{0}, torch::kInt64),
        torch::full({3}, rank == 1 ? 0.1f : 0.0f),
        torch::full({4}, rank == 1 ? 200 : 0, torch::kUInt8),
        torch::full({2}, rank == 1 ? 7 : 0, torch::kInt64),
    };
    broadcastTensors(state, comm, 1);
    got[static_cast<size_t>(rank)] = state;
  });
  for (size_t i = 0; i < got[0].size(); ++i) {
    EXPECT_TRUE(torch::equal(got[0][i], got[1][i])) << "tensor " << i;
    EXPECT_EQ(got[0][i].scalar_type(), got[1][i].scalar_type());
  }
  EXPECT_EQ(got[0][0][1].item<int64_t>(), (int64_t{1} << 53) + 1);
}

}  // namespace
}  // namespace ddprun::worker
