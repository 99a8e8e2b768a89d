// Bucket assignment (the averaging itself is proven end to end by worker_integration_test's DDP
// equivalence tests).
#include <gtest/gtest.h>

#include "worker/gradient_reducer.hpp"

namespace ddprun::worker {
namespace {

using Buckets = std::vector<std::vector<size_t>>;

TEST(AssignBuckets, FillsInReverseParameterOrderUpToTheCap) {
  // Sizes in bytes of parameters 0..4.
  EXPECT_EQ(assignBuckets({100, 100, 100, 100, 100}, 250), (Buckets{{4, 3, 2}, {1, 0}}));
  EXPECT_EQ(assignBuckets({100, 100, 100}, 1000), (Buckets{{2, 1, 0}}));
  // A tensor larger than the cap closes its bucket at once.
  EXPECT_EQ(assignBuckets({10, 5000, 10, 10}, 100), (Buckets{{3, 2, 1}, {0}}));
  EXPECT_EQ(assignBuckets({10, 10}, 1), (Buckets{{1}, {0}}));
}

}  // namespace
}  // namespace ddprun::worker
