// FlatSgd against LibTorch's own torch::optim::SGD: the same parameters, gradients and hyperparameters must give
// bit-equal parameters after every step (the worker's models with real backward passes, and sizes that put
// elements in the vector kernels' tails and across ATen's parallel chunks), and the checkpoints of either must
// resume in the other.
#include <gtest/gtest.h>

#include <sstream>
#include <type_traits>

#include "common/error.hpp"
#include "support/model_compare.hpp"
#include "worker/flat_sgd.hpp"
#include "worker/models.hpp"

namespace ddprun::worker {
namespace {

using test::firstDifference;
using torch::optim::SGDOptions;

std::string describe(const SGDOptions& o) {
  std::ostringstream text;
  text << "lr " << o.lr() << " momentum " << o.momentum() << " dampening " << o.dampening() << " weight decay "
       << o.weight_decay() << (o.nesterov() ? " nesterov" : "");
  return text.str();
}

/// The hyperparameters tried: the worker's default (momentum 0.9, no decay) and every branch of SGD::step. The
/// learning rates are not powers of two, so a product rounded once (a fused multiply-add) and one rounded twice differ.
std::vector<SGDOptions> optionSets() {
  return {SGDOptions(0.0137).momentum(0.9),
          SGDOptions(0.0137).momentum(0.9).weight_decay(5e-4),
          SGDOptions(0.0137),
          SGDOptions(0.0291).weight_decay(1e-3),
          SGDOptions(0.0137).momentum(0.85).dampening(0.1).weight_decay(3e-4),
          SGDOptions(0.0137).momentum(0.9).nesterov(true).weight_decay(2e-4)};
}

std::vector<torch::Tensor> copyOf(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> copies;
  for (const auto& p : params) copies.push_back(p.detach().clone().requires_grad_(true));
  return copies;
}

/// Sizes around the AVX2/AVX-512 vector widths (tails of 1 to 15 floats) and one over ATen's parallel grain
/// (32,768 elements), in one parameter list, so that a flat buffer shifts every tail and chunk boundary.
std::vector<torch::Tensor> oddParameters() {
  std::vector<torch::Tensor> params;
  for (int64_t n : {1, 7, 9, 15, 17, 31, 33, 1023, 40961, 3}) params.push_back(torch::randn({n}).requires_grad_(true));
  params.push_back(torch::randn({13, 29}).requires_grad_(true));
  return params;
}

TEST(FlatSgd, IsBitEqualToLibTorchSgdOnOddSizes) {
  torch::manual_seed(11);
  for (const SGDOptions& options : optionSets()) {
    SCOPED_TRACE(describe(options));
    std::vector<torch::Tensor> reference = oddParameters();
    std::vector<torch::Tensor> flat = copyOf(reference);
    torch::optim::SGD sgd(reference, options);
    FlatSgd flatSgd(flat, options);
    for (int step = 0; step < 25; ++step) {
      sgd.zero_grad();
      flatSgd.zeroGrad();
      for (size_t i = 0; i < reference.size(); ++i) {
        // Gradients of several magnitudes, as late training has beside early.
        const torch::Tensor grad = torch::randn(reference[i].sizes()) * std::pow(10.0, (step % 5) - 3);
        reference[i].mutable_grad() = grad.clone();
        flat[i].grad().copy_(grad);
      }
      sgd.step();
      flatSgd.step();
      ASSERT_EQ(firstDifference(reference, flat), "") << "after step " << step;
    }
  }
}

/// Trains `name` for `steps` steps on random batches with real backward passes, under SGD and under FlatSgd
/// from the same initial parameters, and compares every parameter after every step.
void expectBitEqualTraining(const std::string& name, const SGDOptions& options, int steps) {
  torch::manual_seed(5);
  auto reference = makeModel(name);
  auto flat = makeModel(name);
  {
    torch::NoGradGuard noGrad;
    auto from = reference->parameters();
    auto to = flat->parameters();
    for (size_t i = 0; i < from.size(); ++i) to[i].copy_(from[i]);
  }
  torch::optim::SGD sgd(reference->parameters(), options);
  FlatSgd flatSgd(flat->parameters(), options);
  for (int step = 0; step < steps; ++step) {
    const torch::Tensor images = torch::rand({32, 1, 28, 28});
    const torch::Tensor labels = torch::randint(0, 10, {32});
    sgd.zero_grad();
    torch::nn::functional::cross_entropy(reference->forward(images), labels).backward();
    sgd.step();
    flatSgd.zeroGrad();
    torch::nn::functional::cross_entropy(flat->forward(images), labels).backward();
    flatSgd.step();
    ASSERT_EQ(firstDifference(reference->parameters(), flat->parameters()), "") << name << " after step " << step;
  }
}

TEST(FlatSgd, TrainsTheMlpBitEqualToLibTorchSgd) {
  for (const SGDOptions& options : optionSets()) {
    SCOPED_TRACE(describe(options));
    expectBitEqualTraining("mlp", options, 12);
  }
}

TEST(FlatSgd, TrainsTheCnnBitEqualToLibTorchSgd) {
  expectBitEqualTraining("cnn", SGDOptions(0.0137).momentum(0.9).weight_decay(5e-4), 8);
}

TEST(FlatSgd, ParametersAndGradientsAreViewsOfOneBuffer) {
  auto model = makeModel("cnn");
  FlatSgd sgd(model->parameters(), SGDOptions(0.01).momentum(0.9));
  const auto params = model->parameters();
  for (size_t i = 1; i < params.size(); ++i) {
    EXPECT_TRUE(params[i].is_alias_of(params[0])) << "parameter " << i;
    EXPECT_TRUE(params[i].grad().is_alias_of(params[0].grad())) << "gradient " << i;
  }
  // The values survive the move into the buffer.
  torch::manual_seed(3);
  auto fresh = makeModel("cnn");
  torch::manual_seed(3);
  auto moved = makeModel("cnn");
  FlatSgd movedSgd(moved->parameters(), SGDOptions(0.01));
  EXPECT_EQ(firstDifference(fresh->parameters(), moved->parameters()), "");
}

/// The bytes `optimizer` saves.
std::string saved(const torch::optim::Optimizer& optimizer) {
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  std::ostringstream bytes;
  archive.save_to(bytes);
  return bytes.str();
}

void loadInto(torch::optim::Optimizer& optimizer, const std::string& bytes) {
  torch::serialize::InputArchive archive;
  std::istringstream in(bytes);
  archive.load_from(in);
  optimizer.load(archive);
}

TEST(FlatSgd, CheckpointsResumeAcrossSgdAndFlatSgdBitEqual) {
  const SGDOptions options = SGDOptions(0.0137).momentum(0.9).weight_decay(5e-4);
  torch::manual_seed(21);
  const std::vector<torch::Tensor> start = oddParameters();
  auto stepWithGrads = [](torch::optim::Optimizer& optimizer, std::vector<torch::Tensor>& params, int seed) {
    torch::manual_seed(seed);
    for (auto& p : params) p.grad().copy_(torch::randn(p.sizes()));
    optimizer.step();
  };
  auto withGrads = [](std::vector<torch::Tensor> params) {
    for (auto& p : params) p.mutable_grad() = torch::zeros_like(p);
    return params;
  };
  // Three steps under one optimizer, saved; two more under the other after loading.
  for (const bool flatFirst : {true, false}) {
    SCOPED_TRACE(flatFirst ? "FlatSgd's checkpoint read by SGD" : "SGD's checkpoint read by FlatSgd");
    std::vector<torch::Tensor> first = withGrads(copyOf(start));
    std::vector<torch::Tensor> reference = withGrads(copyOf(start));
    std::unique_ptr<torch::optim::Optimizer> writer;
    if (flatFirst) {
      writer = std::make_unique<FlatSgd>(first, options);
    } else {
      writer = std::make_unique<torch::optim::SGD>(first, options);
    }
    torch::optim::SGD uninterrupted(reference, options);
    for (int s = 0; s < 3; ++s) {
      stepWithGrads(*writer, first, s);
      stepWithGrads(uninterrupted, reference, s);
    }
    const std::string bytes = saved(*writer);
    std::vector<torch::Tensor> second = withGrads(copyOf(first));
    std::unique_ptr<torch::optim::Optimizer> reader;
    if (flatFirst) {
      reader = std::make_unique<torch::optim::SGD>(second, options);
    } else {
      reader = std::make_unique<FlatSgd>(second, options);
    }
    loadInto(*reader, bytes);
    for (int s = 3; s < 5; ++s) {
      stepWithGrads(*reader, second, s);
      stepWithGrads(uninterrupted, reference, s);
    }
    EXPECT_EQ(firstDifference(reference, second), "");
  }
}

/// An SGD archive as LibTorch 2.x writes it (torch/optim/serialize.h): the keys are the parameters' addresses in
/// decimal, where 1.13 wrote hex; `lr` is the file's.
std::string archiveWithDecimalKeys(const std::vector<torch::Tensor>& momentum, double lr) {
  torch::serialize::OutputArchive top;
  top.write("pytorch_version", c10::IValue("1.5.0"));
  torch::serialize::OutputArchive state(top.compilation_unit());
  torch::serialize::OutputArchive groups(top.compilation_unit());
  torch::serialize::OutputArchive group(groups.compilation_unit());
  group.write("params/size", torch::tensor(static_cast<int64_t>(momentum.size())));
  for (size_t i = 0; i < momentum.size(); ++i) {
    const std::string key = std::to_string(140000000000000 + 64 * i);
    torch::serialize::OutputArchive entry(state.compilation_unit());
    entry.write("momentum_buffer", c10::IValue(momentum[i]));
    state.write(key, entry);
    group.write("params/" + std::to_string(i), c10::IValue(key));
  }
  torch::serialize::OutputArchive options(group.compilation_unit());
  SGDOptions(lr).momentum(0.5).serialize(options);
  group.write("options", options);
  groups.write("param_groups/size", torch::tensor(static_cast<int64_t>(1)));
  groups.write("param_groups/0", group);
  top.write("state", state);
  top.write("param_groups", groups);
  std::ostringstream bytes;
  top.save_to(bytes);
  return bytes.str();
}

TEST(FlatSgd, LoadsTheMomentumOfAnyLibTorchVersionsArchiveAndKeepsItsOwnOptions) {
  torch::manual_seed(13);
  std::vector<torch::Tensor> params = oddParameters();
  std::vector<torch::Tensor> momentum;
  for (const auto& p : params) momentum.push_back(torch::randn(p.sizes()));
  FlatSgd sgd(params, SGDOptions(0.0137).momentum(0.9));
  loadInto(sgd, archiveWithDecimalKeys(momentum, 7.0));
  ASSERT_TRUE(sgd.hasMomentumState());
  const std::vector<torch::Tensor> loaded = sgd.momentumBuffers();
  EXPECT_EQ(firstDifference(loaded, momentum), "");
  const auto& options = static_cast<const SGDOptions&>(sgd.param_groups()[0].options());
  EXPECT_EQ(options.lr(), 0.0137);  // this run's flags, not the file's 7.0 and 0.5
  EXPECT_EQ(options.momentum(), 0.9);
  // Another model's archive is one clear error.
  momentum.pop_back();
  try {
    loadInto(sgd, archiveWithDecimalKeys(momentum, 7.0));
    FAIL() << "an archive of another model was loaded";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("this model has one of " + std::to_string(params.size())), std::string::npos)
        << e.what();
  }
}

TEST(FlatSgd, SavesTheArchiveSgdSavesNotTheWholeBuffer) {
  const SGDOptions options = SGDOptions(0.01).momentum(0.9);
  torch::manual_seed(2);
  auto a = makeModel("mlp");
  auto b = makeModel("mlp");
  torch::optim::SGD sgd(a->parameters(), options);
  FlatSgd flat(b->parameters(), options);
  const torch::Tensor images = torch::rand({8, 1, 28, 28});
  const torch::Tensor labels = torch::randint(0, 10, {8});
  torch::nn::functional::cross_entropy(a->forward(images), labels).backward();
  torch::nn::functional::cross_entropy(b->forward(images), labels).backward();
  sgd.step();
  flat.step();
  const std::string sgdBytes = saved(sgd);
  const std::string flatBytes = saved(flat);
  // The same tensors; only the parameters' names (SGD's are their addresses) differ, in a few bytes.
  EXPECT_NEAR(static_cast<double>(flatBytes.size()), static_cast<double>(sgdBytes.size()), 0.01 * sgdBytes.size());
}

/// Gives SGD's `state` a momentum buffer for `parameter`, under LibTorch's key (text up to 1.13, a pointer in 2.x).
template <typename StateMap>
void putMomentum(StateMap& state, const torch::Tensor& parameter, torch::Tensor buffer) {
  auto entry = std::make_unique<torch::optim::SGDParamState>();
  entry->momentum_buffer(std::move(buffer));
  if constexpr (std::is_same_v<typename StateMap::key_type, std::string>) {
    std::ostringstream key;
    key << parameter.unsafeGetTensorImpl();
    state[key.str()] = std::move(entry);
  } else {
    state[parameter.unsafeGetTensorImpl()] = std::move(entry);
  }
}

TEST(FlatSgd, MomentumBuffersAreTheStateTheNextStepUses) {
  const SGDOptions options = SGDOptions(0.0137).momentum(0.9);
  torch::manual_seed(8);
  std::vector<torch::Tensor> reference = oddParameters();
  std::vector<torch::Tensor> flat = copyOf(reference);
  torch::optim::SGD sgd(reference, options);
  FlatSgd flatSgd(flat, options);
  EXPECT_FALSE(flatSgd.hasMomentumState());
  // A new rank's state exchange (trainer.cpp): buffers are written from outside, then a step uses them.
  std::vector<torch::Tensor> buffers = flatSgd.momentumBuffers();
  ASSERT_EQ(buffers.size(), flat.size());
  EXPECT_TRUE(flatSgd.hasMomentumState());
  for (size_t i = 0; i < flat.size(); ++i) {
    EXPECT_EQ(buffers[i].abs().sum().item<double>(), 0.0);
    const torch::Tensor given = torch::randn(flat[i].sizes());
    buffers[i].copy_(given);
    putMomentum(sgd.state(), reference[i], given.clone());
  }
  for (size_t i = 0; i < flat.size(); ++i) {
    const torch::Tensor grad = torch::randn(flat[i].sizes());
    reference[i].mutable_grad() = grad.clone();
    flat[i].grad().copy_(grad);
  }
  sgd.step();
  flatSgd.step();
  EXPECT_EQ(firstDifference(reference, flat), "");
  // Dropped state: the next step starts the momentum from the gradient, as SGD's first step does.
  flatSgd.dropMomentumState();
  sgd.state().clear();
  sgd.step();
  flatSgd.step();
  EXPECT_EQ(firstDifference(reference, flat), "");
}

TEST(FlatSgd, TakesBackParametersAndGradientsThatLeftTheBuffer) {
  const SGDOptions options = SGDOptions(0.0137).momentum(0.9);
  torch::manual_seed(4);
  std::vector<torch::Tensor> reference = oddParameters();
  std::vector<torch::Tensor> flat = copyOf(reference);
  torch::optim::SGD sgd(reference, options);
  FlatSgd flatSgd(flat, options);
  {
    // What torch::serialize's InputArchive::read does to a parameter on load: set_ to the tensor read.
    torch::NoGradGuard noGrad;
    flat[3].set_(flat[3].detach().clone());
    reference[3].set_(reference[3].detach().clone());
  }
  for (size_t i = 0; i < flat.size(); ++i) {
    const torch::Tensor grad = torch::randn(flat[i].sizes());
    reference[i].mutable_grad() = grad.clone();
    flat[i].mutable_grad() = grad.clone();  // what backward makes after LibTorch 2.x's zero_grad() (set to none)
  }
  sgd.step();
  flatSgd.step();
  EXPECT_EQ(firstDifference(reference, flat), "");
  EXPECT_TRUE(flat[3].is_alias_of(flat[0]));
  EXPECT_TRUE(flat[3].grad().is_alias_of(flat[0].grad()));
}

TEST(FlatSgd, RefusesWhatOneBufferCannotHold) {
  std::vector<torch::Tensor> mixed{torch::zeros({3}).requires_grad_(true),
                                   torch::zeros({3}, torch::kFloat64).requires_grad_(true)};
  EXPECT_THROW(FlatSgd(mixed, SGDOptions(0.1)), Error);
  EXPECT_THROW(FlatSgd({}, SGDOptions(0.1)), Error);
  std::vector<torch::Tensor> params{torch::zeros({3}).requires_grad_(true)};
  FlatSgd sgd(params, SGDOptions(0.1));
  params[0].mutable_grad() = torch::Tensor();
  try {
    sgd.step();
    FAIL() << "a parameter without a gradient was stepped";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parameter 0 has no gradient"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ddprun::worker
