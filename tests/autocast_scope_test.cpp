// --amp's autocast scope on the CPU (the device every build has): bf16 inside, restored outside, and the
// cache of casted weights cleared so the next step never sees the last step's weights.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "worker/autocast_scope.hpp"

namespace ddprun::worker {
namespace {

TEST(AutocastScope, RunsLinearLayersInBf16AndRestoresTheStateOnExit) {
  const torch::Device cpu(torch::kCPU);
  torch::nn::Linear layer(8, 4);
  const torch::Tensor x = torch::randn({2, 8});
  ASSERT_FALSE(autocastEnabled(cpu));
  {
    AutocastScope scope(cpu, true);
    EXPECT_TRUE(autocastEnabled(cpu));
    EXPECT_EQ(layer->forward(x).scalar_type(), torch::kBFloat16);
  }
  EXPECT_FALSE(autocastEnabled(cpu));
  EXPECT_EQ(layer->forward(x).scalar_type(), torch::kFloat32);
  EXPECT_EQ(layer->weight.scalar_type(), torch::kFloat32) << "weights stay float32";
}

TEST(AutocastScope, DisabledScopeChangesNothing) {
  const torch::Device cpu(torch::kCPU);
  torch::nn::Linear layer(8, 4);
  AutocastScope scope(cpu, false);
  EXPECT_FALSE(autocastEnabled(cpu));
  EXPECT_EQ(layer->forward(torch::randn({2, 8})).scalar_type(), torch::kFloat32);
}

TEST(AutocastScope, NextScopeSeesUpdatedWeights) {
  const torch::Device cpu(torch::kCPU);
  torch::nn::Linear layer(8, 4);
  const torch::Tensor x = torch::ones({1, 8});
  torch::Tensor before;
  {
    AutocastScope scope(cpu, true);
    before = layer->forward(x);
  }
  {
    torch::NoGradGuard noGrad;
    layer->weight.add_(1.0);
  }
  AutocastScope scope(cpu, true);
  const torch::Tensor after = layer->forward(x);
  // Each output grows by 8 (eight inputs of 1 times +1); a stale bf16 weight cache would give 0.
  EXPECT_NEAR((after - before).to(torch::kFloat32).mean().item<float>(), 8.0f, 0.2f);
}

}  // namespace
}  // namespace ddprun::worker
