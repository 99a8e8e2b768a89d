// The optimizer's cost on this machine's CPU: LibTorch's per-parameter torch::optim::SGD (the anchor) against the
// worker's FlatSgd (worker/flat_sgd.hpp), interleaved in one run, for the worker's two models with its default
// hyperparameters (lr 0.01, momentum 0.9). Three timings per model:
//   step        one optimizer step (the gradients of one real backward, kept: zeroed ones would let the momentum
//               decay into denormal floats, which the CPU computes many times slower);
//   zero grads  zeroing the gradients;
//   train step  what the worker does per step without a group: zero, forward, loss, backward, step (batch 64).
// Usage: [OMP_NUM_THREADS=N] optimizer_bench [repeats (15)] [iterations per repeat (200)]; N as the worker takes it
// (ddprun gives each of several workers 1, as torchrun does).
// Prints one row per model and timing: the median microseconds per iteration of each (min-max over the repeats)
// and the anchor's median over FlatSgd's.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "worker/flat_sgd.hpp"
#include "worker/models.hpp"

namespace {

using ddprun::worker::FlatSgd;
using ddprun::worker::makeModel;

double seconds() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Spread {
  double median, min, max;
};

Spread spread(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return {values[values.size() / 2], values.front(), values.back()};
}

/// Microseconds per call of `body`, once per repeat, the two bodies alternating which goes first.
std::pair<Spread, Spread> interleaved(const std::function<void()>& anchor, const std::function<void()>& flat,
                                      int repeats, int iterations) {
  std::vector<double> a, f;
  auto time = [&](const std::function<void()>& body) {
    const double start = seconds();
    for (int i = 0; i < iterations; ++i) body();
    return (seconds() - start) / iterations * 1e6;
  };
  for (int r = 0; r < repeats; ++r) {
    if (r % 2 == 0) {
      a.push_back(time(anchor));
      f.push_back(time(flat));
    } else {
      f.push_back(time(flat));
      a.push_back(time(anchor));
    }
  }
  return {spread(a), spread(f)};
}

void row(const std::string& model, const char* what, const std::pair<Spread, Spread>& r) {
  std::printf("| %s | %s | %.1f (%.1f-%.1f) | %.1f (%.1f-%.1f) | %.2fx |\n", model.c_str(), what, r.first.median,
              r.first.min, r.first.max, r.second.median, r.second.min, r.second.max, r.first.median / r.second.median);
  std::fflush(stdout);
}

void benchModel(const std::string& name, int repeats, int iterations) {
  torch::manual_seed(1);
  auto anchorModel = makeModel(name);
  auto flatModel = makeModel(name);
  {
    torch::NoGradGuard noGrad;
    auto from = anchorModel->parameters();
    auto to = flatModel->parameters();
    for (size_t i = 0; i < from.size(); ++i) to[i].copy_(from[i]);
  }
  const auto options = torch::optim::SGDOptions(0.01).momentum(0.9);
  torch::optim::SGD sgd(anchorModel->parameters(), options);
  FlatSgd flat(flatModel->parameters(), options);
  const torch::Tensor images = torch::rand({64, 1, 28, 28});
  const torch::Tensor labels = torch::randint(0, 10, {64});
  auto trainStep = [&](torch::nn::Module& model, const std::function<void()>& zero, const std::function<void()>& step) {
    zero();
    auto& classifier = static_cast<ddprun::worker::Classifier&>(model);
    torch::nn::functional::cross_entropy(classifier.forward(images), labels).backward();
    step();
  };
  auto sgdZero = [&] { sgd.zero_grad(); };
  auto sgdStep = [&] { sgd.step(); };
  auto flatZero = [&] { flat.zeroGrad(); };
  auto flatStep = [&] { flat.step(); };
  // Gradients to step with, and the momentum state made: what every later step sees.
  trainStep(*anchorModel, sgdZero, sgdStep);
  trainStep(*flatModel, flatZero, flatStep);
  row(name, "step", interleaved(sgdStep, flatStep, repeats, iterations));
  row(name, "zero grads", interleaved(sgdZero, flatZero, repeats, iterations));
  trainStep(*anchorModel, sgdZero, sgdStep);  // gradients again for the train steps' first backward to add to
  trainStep(*flatModel, flatZero, flatStep);
  row(name, "train step",
      interleaved([&] { trainStep(*anchorModel, sgdZero, sgdStep); },
                  [&] { trainStep(*flatModel, flatZero, flatStep); }, repeats, std::max(1, iterations / 10)));
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 15;
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 200;
  if (const char* threads = std::getenv("OMP_NUM_THREADS"); threads != nullptr && std::atoi(threads) > 0) {
    torch::set_num_threads(std::atoi(threads));  // as the worker does (worker/main.cpp)
  }
  if (repeats < 1 || iterations < 1) {
    std::fprintf(stderr, "usage: optimizer_bench [repeats >= 1] [iterations >= 1]\n");
    return 2;
  }
  std::printf("LibTorch %d.%d, %d intra-op threads, %d repeats\n\n", TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR,
              torch::get_num_threads(), repeats);
  std::printf("| model | per iteration | SGD µs, median (min-max) | FlatSgd µs | SGD / FlatSgd |\n");
  std::printf("|---|---|---|---|---|\n");
  for (const char* model : {"mlp", "cnn"}) benchModel(model, repeats, iterations);
  return 0;
}
