#pragma once
// Test helpers: how far apart two models' parameters are, and whether two lists of tensors are equal bit for bit.
#include <torch/torch.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

namespace ddprun::test {

/// max |a_i - b_i| over all parameters of two models of the same architecture.
inline double maxAbsParameterDiff(torch::nn::Module& a, torch::nn::Module& b) {
  double worst = 0;
  auto pa = a.parameters();
  auto pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i) worst = std::max(worst, (pa[i] - pb[i]).abs().max().item<double>());
  return worst;
}

/// The first of two equally long lists of tensors that differ in any bit, as "parameter i differs by up to x", or ""
/// when all are equal.
inline std::string firstDifference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return std::to_string(a.size()) + " tensors against " + std::to_string(b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (!torch::equal(a[i], b[i])) {
      std::ostringstream text;
      text << "parameter " << i << " differs by up to " << (a[i] - b[i]).abs().max().item<double>();
      return text.str();
    }
  }
  return "";
}

}  // namespace ddprun::test
