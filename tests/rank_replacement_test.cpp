// The rank-replacement protocol's state exchange (worker/rank_replacement.hpp, step 4) with the ranks as threads
// over an in-memory communicator (support/thread_ranks.hpp): which rank sends, who loads, and what a new rank ends
// with; plus the trainer's state moving as checkpoint bytes (encodeTrainingState / decodeTrainingState).
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "support/thread_ranks.hpp"
#include "worker/checkpoint.hpp"
#include "worker/models.hpp"
#include "worker/rank_replacement.hpp"

namespace ddprun::worker {
namespace {

using test::spawnRanks;
using test::ThreadCommunicator;
using test::ThreadGroup;

TEST(RankReplacement, TheLowestRankFurthestAlongSendsAndOnlyRanksBehindItLoad) {
  // Rank 2 is new; rank 0 abandoned step 41 (its collective failed first), ranks 1 and 3 completed it.
  const std::vector<int64_t> steps{40, 41, -1, 41};
  ThreadGroup group(4);
  std::mutex mutex;
  std::vector<int> sources(4, -1);
  std::vector<std::string> loaded(4);
  std::atomic<int> encodes{0};
  spawnRanks(4, [&](int rank) {
    ThreadCommunicator comm(group, rank);
    StateSync mine;
    mine.completedSteps = steps[static_cast<size_t>(rank)];
    mine.encode = [&, rank] {
      ++encodes;
      return std::string("state of rank ") + std::to_string(rank);
    };
    mine.load = [&, rank](const std::string& bytes) {
      std::lock_guard<std::mutex> lock(mutex);
      loaded[static_cast<size_t>(rank)] = bytes;
    };
    const int source = syncTrainingState(comm, mine);
    std::lock_guard<std::mutex> lock(mutex);
    sources[static_cast<size_t>(rank)] = source;
  });
  EXPECT_EQ(sources, (std::vector<int>{1, 1, 1, 1}));
  EXPECT_EQ(encodes.load(), 1) << "only the source serialises its state";
  EXPECT_EQ(loaded, (std::vector<std::string>{"state of rank 1", "", "state of rank 1", ""}))
      << "ranks at the source's step keep their own state";
}

TEST(RankReplacement, AGroupWithNoStateAnywhereIsAnErrorOnEveryRank) {
  ThreadGroup group(2);
  std::atomic<int> failures{0};
  spawnRanks(2, [&](int rank) {
    ThreadCommunicator comm(group, rank);
    StateSync fresh;
    fresh.encode = [] { return std::string(); };
    fresh.load = [](const std::string&) {};
    try {
      syncTrainingState(comm, fresh);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("no rank of the new group has a training state"), std::string::npos);
      ++failures;
    }
  });
  EXPECT_EQ(failures.load(), 2);
}

TEST(RankReplacement, ATrainingStateSentAsBytesRestoresModelOptimizerProgressAndGenerator) {
  torch::manual_seed(7);
  auto source = makeModel("mlp");
  torch::optim::SGD sourceOptimizer(source->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  // One step, so the optimizer has momentum buffers to send.
  const torch::Tensor images = torch::rand({8, 1, 28, 28});
  const torch::Tensor labels = torch::randint(0, 10, {8}, torch::kInt64);
  torch::nn::functional::cross_entropy(source->forward(images), labels).backward();
  sourceOptimizer.step();
  TrainingProgress progress;
  progress.epoch = 2;
  progress.stepInEpoch = 17;
  progress.globalStep = 159;
  progress.worldSize = 2;
  progress.batchSize = 64;
  progress.samplerSeed = 5;
  const std::string bytes = encodeTrainingState(*source, sourceOptimizer, progress);
  const torch::Tensor generatorAfterSend = at::detail::getDefaultCPUGenerator().get_state();

  torch::manual_seed(99);  // the new rank starts elsewhere
  auto fresh = makeModel("mlp");
  torch::optim::SGD freshOptimizer(fresh->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  const TrainingProgress got = decodeTrainingState(bytes, *fresh, freshOptimizer);
  EXPECT_EQ(got.epoch, 2);
  EXPECT_EQ(got.stepInEpoch, 17);
  EXPECT_EQ(got.globalStep, 159);
  EXPECT_EQ(got.samplerSeed, 5);
  const auto a = source->parameters(), b = fresh->parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;
  // The next step from both must be the same: momentum buffers came along.
  for (auto* opt : {&sourceOptimizer, &freshOptimizer}) opt->zero_grad();
  torch::nn::functional::cross_entropy(source->forward(images), labels).backward();
  torch::nn::functional::cross_entropy(fresh->forward(images), labels).backward();
  sourceOptimizer.step();
  freshOptimizer.step();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "after a step, parameter " << i;
  EXPECT_TRUE(torch::equal(at::detail::getDefaultCPUGenerator().get_state(), generatorAfterSend))
      << "the generator is the sender's";
}

TEST(RankReplacement, DamagedStateBytesAreRefused) {
  auto model = makeModel("mlp");
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  std::string bytes = encodeTrainingState(*model, optimizer, TrainingProgress{});
  bytes[bytes.size() / 2] ^= 0x5a;
  EXPECT_THROW(decodeTrainingState(bytes, *model, optimizer), DataError);
}

}  // namespace
}  // namespace ddprun::worker
