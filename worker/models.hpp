#pragma once
// The networks the worker trains on 28x28 grey images with 10 classes.
#include <torch/torch.h>

#include <memory>
#include <string>

namespace ddprun::worker {

/// A classifier: input [B, 1, 28, 28] float, output logits [B, 10].
class Classifier : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(torch::Tensor images) = 0;
};

/// 784 -> 256 -> ReLU -> 10, the same layers as nn.Sequential(Flatten, Linear(784, 256), ReLU,
/// Linear(256, 10)) in Python, so parameters have the same names, shapes and order.
class Mlp : public Classifier {
 public:
  Mlp();
  torch::Tensor forward(torch::Tensor images) override;

 private:
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
};

/// A small CNN: conv5x5(1->16) ReLU maxpool2, conv5x5(16->32) ReLU maxpool2, 512 -> 128 -> ReLU -> 10.
class Cnn : public Classifier {
 public:
  Cnn();
  torch::Tensor forward(torch::Tensor images) override;

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
};

/// Builds "mlp" or "cnn" with torch's default initialisation; throws ConfigError for other names.
std::shared_ptr<Classifier> makeModel(const std::string& name);

}  // namespace ddprun::worker
