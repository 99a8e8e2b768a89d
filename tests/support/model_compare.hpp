#pragma once
// Test helper: how far apart two models' parameters are.
#include <torch/torch.h>

#include <algorithm>

namespace ddprun::test {

/// max |a_i - b_i| over all parameters of two models of the same architecture.
inline double maxAbsParameterDiff(torch::nn::Module& a, torch::nn::Module& b) {
  double worst = 0;
  auto pa = a.parameters();
  auto pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i) worst = std::max(worst, (pa[i] - pb[i]).abs().max().item<double>());
  return worst;
}

}  // namespace ddprun::test
