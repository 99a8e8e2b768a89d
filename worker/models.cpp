#include "worker/models.hpp"

#include "common/error.hpp"

namespace ddprun::worker {

Mlp::Mlp() {
  fc1_ = register_module("fc1", torch::nn::Linear(784, 256));
  fc2_ = register_module("fc2", torch::nn::Linear(256, 10));
}

torch::Tensor Mlp::forward(torch::Tensor images) {
  return fc2_->forward(torch::relu(fc1_->forward(images.flatten(1))));
}

Cnn::Cnn() {
  conv1_ = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 5)));
  conv2_ = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 5)));
  fc1_ = register_module("fc1", torch::nn::Linear(32 * 4 * 4, 128));
  fc2_ = register_module("fc2", torch::nn::Linear(128, 10));
}

torch::Tensor Cnn::forward(torch::Tensor images) {
  auto x = torch::max_pool2d(torch::relu(conv1_->forward(images)), 2);  // [B, 16, 12, 12]
  x = torch::max_pool2d(torch::relu(conv2_->forward(x)), 2);            // [B, 32, 4, 4]
  return fc2_->forward(torch::relu(fc1_->forward(x.flatten(1))));
}

std::shared_ptr<Classifier> makeModel(const std::string& name) {
  if (name == "mlp") return std::make_shared<Mlp>();
  if (name == "cnn") return std::make_shared<Cnn>();
  throw ConfigError("--model: expected mlp or cnn, got '" + name + "'");
}

}  // namespace ddprun::worker
