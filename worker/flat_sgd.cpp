#include "worker/flat_sgd.hpp"

#include <string>

#include "common/error.hpp"

namespace ddprun::worker {
namespace {

std::vector<torch::Tensor> checkedParameters(std::vector<torch::Tensor> params) {
  if (params.empty()) throw Error("FlatSgd: no parameters to optimize");
  for (const auto& p : params) {
    if (p.scalar_type() != params[0].scalar_type() || p.device() != params[0].device()) {
      throw Error(
          "FlatSgd: the parameters must share one dtype and device (one flat buffer holds them all); found " +
          c10::str(params[0].scalar_type(), " on ", params[0].device(), " and ", p.scalar_type(), " on ", p.device()));
    }
  }
  return params;
}

}  // namespace

FlatSgd::FlatSgd(std::vector<torch::Tensor> params, torch::optim::SGDOptions options)
    : SGD(checkedParameters(params), options), params_(std::move(params)) {
  torch::NoGradGuard noGrad;
  int64_t total = 0;
  for (const auto& p : params_) {
    offsets_.push_back(total);
    total += p.numel();
  }
  const auto flatOptions = params_[0].options().requires_grad(false);
  flatParams_ = torch::empty({total}, flatOptions);
  flatGrads_ = torch::zeros({total}, flatOptions);
  keepInFlatBuffers(false);
}

const torch::optim::SGDOptions& FlatSgd::sgdOptions() const {
  return static_cast<const torch::optim::SGDOptions&>(param_groups()[0].options());
}

torch::Tensor FlatSgd::slot(const torch::Tensor& flat, size_t i) const {
  return flat.narrow(0, offsets_[i], params_[i].numel()).view(params_[i].sizes());
}

const void* FlatSgd::address(const torch::Tensor& flat, size_t i) const {
  return static_cast<const char*>(flat.data_ptr()) + offsets_[i] * flat.element_size();
}

void FlatSgd::keepInFlatBuffers(bool requireGrads) {
  torch::NoGradGuard noGrad;
  for (size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor& p = params_[i];
    if (p.data_ptr() != address(flatParams_, i)) {
      torch::Tensor home = slot(flatParams_, i);
      home.copy_(p.detach());
      p.set_data(home);
    }
    torch::Tensor& grad = p.mutable_grad();
    if (!grad.defined() && requireGrads) {
      throw Error("FlatSgd: parameter " + std::to_string(i) +
                  " has no gradient; SGD would skip it, a flat step cannot (zero gradients with zeroGrad())");
    }
    if (!grad.defined() || grad.data_ptr() != address(flatGrads_, i)) {
      torch::Tensor home = slot(flatGrads_, i);
      if (grad.defined()) home.copy_(grad.detach());
      grad = home;
    }
  }
}

const torch::Tensor& FlatSgd::momentum() {
  if (!flatMomentum_.defined()) flatMomentum_ = torch::zeros_like(flatParams_);
  return flatMomentum_;
}

void FlatSgd::zeroGrad() {
  keepInFlatBuffers(false);
  flatGrads_.zero_();
}

torch::Tensor FlatSgd::step(LossClosure closure) {
  // The order and the operations of SGD::step for one parameter, with `flat…` in place of p, p.grad and its buffer.
  torch::NoGradGuard noGrad;
  torch::Tensor loss;
  if (closure != nullptr) {
    at::AutoGradMode enableGrad(true);
    loss = closure();
  }
  keepInFlatBuffers(true);
  const torch::optim::SGDOptions& options = sgdOptions();
  torch::Tensor direction = flatGrads_;  // SGD's d_p
  if (options.weight_decay() != 0) {
    if (!decayedGrads_.defined()) decayedGrads_ = torch::empty_like(flatGrads_);
    at::add_out(decayedGrads_, flatGrads_, flatParams_, options.weight_decay());  // d_p.add(p, weight_decay)
    direction = decayedGrads_;
  }
  if (options.momentum() != 0) {
    const torch::Tensor& buffer = momentum();
    if (!hasMomentum_) {
      buffer.copy_(direction);  // SGD's first step: buf = clone(d_p)
      hasMomentum_ = true;
    } else {
      buffer.mul_(options.momentum()).add_(direction, 1 - options.dampening());
    }
    direction = options.nesterov() ? direction.add(buffer, options.momentum()) : buffer;
  }
  flatParams_.add_(direction, -1 * options.lr());
  return loss;
}

void FlatSgd::save(torch::serialize::OutputArchive& archive) const {
  // SGD's layout (torch/optim/serialize.h: pytorch_version, state, param_groups), written here rather than by
  // SGD::save, which names each parameter by its TensorImpl's address and writes the states in its hash map's order:
  // two runs with the same state wrote different bytes. Here parameter i is named "i" (a decimal number, which 2.x's
  // loader parses and 1.13's takes as text; both match the states through the list of names) and everything is
  // written in parameter order. Each state is one compact tensor: a view of the flat buffer would have the archive
  // hold the whole buffer's storage.
  archive.write("pytorch_version", c10::IValue("1.5.0"));
  torch::serialize::OutputArchive states(archive.compilation_unit());
  for (size_t i = 0; hasMomentum_ && i < params_.size(); ++i) {
    torch::optim::SGDParamState parameterState;
    parameterState.momentum_buffer(slot(flatMomentum_, i).clone());
    torch::serialize::OutputArchive state(archive.compilation_unit());
    parameterState.serialize(state);
    states.write(std::to_string(i), state);
  }
  archive.write("state", states);
  torch::serialize::OutputArchive group(archive.compilation_unit());
  group.write("params/size", torch::tensor(static_cast<int64_t>(params_.size())));
  for (size_t i = 0; i < params_.size(); ++i) {
    group.write("params/" + std::to_string(i), c10::IValue(std::to_string(i)));
  }
  torch::serialize::OutputArchive options(archive.compilation_unit());
  sgdOptions().serialize(options);
  group.write("options", options);
  torch::serialize::OutputArchive groups(archive.compilation_unit());
  groups.write("param_groups/size", torch::tensor(int64_t{1}));
  groups.write("param_groups/0", group);
  archive.write("param_groups", groups);
}

void FlatSgd::load(torch::serialize::InputArchive& archive) {
  // Read here rather than by SGD::load. Its key matching differs between LibTorch versions: 2.x parses the saved
  // keys as decimal numbers, while 1.13 wrote the addresses in hex, so a 1.13 file gives 2.x null states. 2.x's
  // load also replaces this optimizer's lr, momentum and weight decay with the file's, which 1.13's keeps. Here
  // each parameter's key comes from the file's own list (param_groups/0/params/<i>, torch/optim/serialize.h), and
  // the options stay the ones this run was given, in every version.
  torch::NoGradGuard noGrad;
  const int64_t count = static_cast<int64_t>(params_.size());
  torch::serialize::InputArchive groups;
  torch::serialize::InputArchive group;
  torch::Tensor groupCount;
  torch::Tensor paramCount;
  if (!archive.try_read("param_groups", groups) || !groups.try_read("param_groups/size", groupCount) ||
      !groups.try_read("param_groups/0", group) || !group.try_read("params/size", paramCount)) {
    throw DataError("the optimizer state is not LibTorch SGD's (no param_groups/0/params)");
  }
  if (groupCount.item<int64_t>() != 1 || paramCount.item<int64_t>() != count) {
    throw DataError("the optimizer state has " + std::to_string(groupCount.item<int64_t>()) +
                    " parameter group(s) of " + std::to_string(paramCount.item<int64_t>()) +
                    " parameters; this model has one of " + std::to_string(count));
  }
  torch::serialize::InputArchive state;
  const bool hasState = archive.try_read("state", state);
  int64_t found = 0;
  for (int64_t i = 0; i < count; ++i) {
    c10::IValue key;
    torch::serialize::InputArchive entry;
    c10::IValue buffer;
    if (!group.try_read("params/" + std::to_string(i), key) || !key.isString()) {
      throw DataError("the optimizer state names no key for parameter " + std::to_string(i));
    }
    if (!hasState || !state.try_read(key.toStringRef(), entry) || !entry.try_read("momentum_buffer", buffer)) continue;
    const torch::Tensor& values = buffer.toTensor();
    if (!values.sizes().equals(params_[i].sizes())) {
      throw DataError("the momentum of parameter " + std::to_string(i) + " has shape " + c10::str(values.sizes()) +
                      ", the parameter " + c10::str(params_[i].sizes()));
    }
    slot(momentum(), i).copy_(values);
    ++found;
  }
  if (found != 0 && found != count) {
    throw DataError("the optimizer state holds momentum for " + std::to_string(found) + " of " + std::to_string(count) +
                    " parameters (a flat SGD needs all or none)");
  }
  hasMomentum_ = found > 0;
}

std::vector<torch::Tensor> FlatSgd::momentumBuffers() {
  std::vector<torch::Tensor> buffers;
  if (sgdOptions().momentum() == 0) return buffers;  // SGD keeps none
  const torch::Tensor& flat = momentum();
  if (!hasMomentum_) flat.zero_();
  hasMomentum_ = true;
  for (size_t i = 0; i < params_.size(); ++i) buffers.push_back(slot(flat, i));
  return buffers;
}

}  // namespace ddprun::worker
