// Our DistributedSampler against Python's torch.utils.data.DistributedSampler (python3-torch), index
// list for index list, over sizes, world sizes, seeds, epochs, shuffle and drop_last.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "support/child_process.hpp"
#include "worker/distributed_sampler.hpp"

namespace ddprun::worker {
namespace {

struct Case {
  int64_t size, world, seed, epoch;
  bool shuffle, dropLast;
};

std::vector<Case> cases() {
  std::vector<Case> all;
  for (int64_t size : {1, 7, 10, 97, 1000, 9000, 60000}) {
    for (int64_t world : {1, 2, 3, 8}) {
      for (auto [seed, epoch] : {std::pair<int64_t, int64_t>{0, 0}, {0, 3}, {42, 1}, {12345, 0}}) {
        for (bool dropLast : {false, true}) {
          if (dropLast && size < world) continue;  // PyTorch yields nothing there; we refuse it
          all.push_back({size, world, seed, epoch, true, dropLast});
        }
      }
      all.push_back({size, world, 0, 0, false, false});
    }
  }
  return all;
}

// Python computes every case's per-rank lists in one interpreter start.
nlohmann::json pythonIndices(const std::vector<Case>& all) {
  nlohmann::json input = nlohmann::json::array();
  for (const auto& c : all) input.push_back({c.size, c.world, c.seed, c.epoch, c.shuffle, c.dropLast});
  const std::string script = R"(
import json, sys
from torch.utils.data import DistributedSampler
out = []
for size, world, seed, epoch, shuffle, drop_last in json.loads(sys.argv[1]):
    ranks = []
    for rank in range(world):
        s = DistributedSampler(range(size), num_replicas=world, rank=rank, shuffle=shuffle, seed=seed, drop_last=drop_last)
        s.set_epoch(epoch)
        ranks.append(list(s))
    out.append(ranks)
print(json.dumps(out))
)";
  auto result = test::runProcess(test::pythonExe(), {"-c", script, input.dump()});
  if (result.exitCode != 0) throw std::runtime_error("python3 failed: " + result.output);
  return nlohmann::json::parse(result.output);
}

TEST(DistributedSampler, MatchesPyTorchIndexForIndex) {
  auto all = cases();
  nlohmann::json expected = pythonIndices(all);
  ASSERT_EQ(expected.size(), all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    const Case& c = all[i];
    for (int64_t rank = 0; rank < c.world; ++rank) {
      DistributedSampler sampler(c.size, c.world, rank, c.shuffle, c.seed, c.dropLast);
      sampler.setEpoch(c.epoch);
      auto mine = sampler.indices();
      auto theirs = expected[i][rank].get<std::vector<int64_t>>();
      ASSERT_EQ(mine, theirs) << "size " << c.size << " world " << c.world << " rank " << rank << " seed " << c.seed
                              << " epoch " << c.epoch << " shuffle " << c.shuffle << " drop_last " << c.dropLast;
      EXPECT_EQ(sampler.numSamples(), static_cast<int64_t>(theirs.size()));
    }
  }
}

TEST(DistributedSampler, DifferentEpochsShuffleDifferently) {
  DistributedSampler sampler(1000, 2, 0);
  auto first = sampler.indices();
  sampler.setEpoch(1);
  EXPECT_NE(first, sampler.indices());
}

TEST(DistributedSampler, RejectsBadRanks) {
  EXPECT_THROW(DistributedSampler(10, 2, 2), ConfigError);
  EXPECT_THROW(DistributedSampler(10, 2, -1), ConfigError);
  EXPECT_THROW(DistributedSampler(0, 2, 0), ConfigError);
  EXPECT_THROW(DistributedSampler(1, 2, 0, true, 0, true), ConfigError);
}

}  // namespace
}  // namespace ddprun::worker
