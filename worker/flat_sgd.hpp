#pragma once
// SGD over flat buffers: LibTorch's SGD, the same arithmetic in the same order, applied once to all parameters.
#include <torch/torch.h>

#include <vector>

namespace ddprun::worker {

/// LibTorch's torch::optim::SGD (torch/csrc/api/src/optim/sgd.cpp) with the parameters, their gradients and their
/// momentum each in one flat buffer, so that a step is 2 to 4 elementwise operations in all (weight decay, momentum,
/// update) instead of 2 to 4 per parameter: on a GPU that many kernel launches fewer, on the CPU fewer dispatches
/// and one parallel loop over all elements. Python's foreach SGD saves launches the same way.
///
/// Construction re-homes each parameter's data and `.grad` into views of the flat buffers, values kept (what
/// `param.data = flat[...]` does in Python). A step applies ATen's own kernels in SGD's order to the flat
/// buffers; the operations are elementwise, so the results are bit-equal to SGD's (tests/flat_sgd_test.cpp
/// checks it against SGD itself). Checkpoints are SGD's: save() writes SGD's layout, one momentum tensor per
/// parameter, with the parameters named by their index where SGD names them by address, so the same state always
/// gives the same bytes; any SGD::load reads it. load() reads SGD's archives, from any LibTorch version (its
/// momentum; the lr, momentum and weight decay stay this optimizer's, as LibTorch 1.13's SGD::load keeps them).
///
/// Unlike SGD, every parameter is updated on every step, as SGD does with a zeroed `.grad` (LibTorch 1.13's
/// zero_grad()): step() throws ddprun::Error for a parameter with no `.grad` at all. Zero gradients with zeroGrad():
/// LibTorch 2.x's zero_grad() drops the `.grad` views (the next backward then makes new ones, which step() copies
/// back in, at a cost). One parameter group.
class FlatSgd : public torch::optim::SGD {
 public:
  /// Throws ddprun::Error when there are no parameters, or they differ in dtype or device (one buffer holds all).
  FlatSgd(std::vector<torch::Tensor> params, torch::optim::SGDOptions options);

  /// One SGD step for all parameters; `closure` as in torch::optim::Optimizer (evaluated with grad mode on).
  torch::Tensor step(LossClosure closure = nullptr) override;
  /// Zeroes every parameter's gradient: one fill of the flat gradient buffer.
  void zeroGrad();

  /// Writes what SGD::save writes for the same parameters and state, with parameter i named "i" (SGD names it by its
  /// address) and the states in parameter order: the bytes depend on the state alone.
  void save(torch::serialize::OutputArchive& archive) const override;
  /// Reads an archive SGD wrote (torch/optim/serialize.h's layout): each parameter's momentum, matched by the
  /// file's own parameter list, into the flat buffer. Throws ddprun::DataError for an archive of another shape of
  /// model, or one holding momentum for some of the parameters but not all (never written by this class or by SGD
  /// after a step in which every parameter had a gradient).
  void load(torch::serialize::InputArchive& archive) override;

  /// The momentum buffers in parameter order, as views of the flat buffer (SGD's state), made zero where the
  /// optimizer has not stepped yet, and from then on counted as state; empty when the momentum is 0.
  std::vector<torch::Tensor> momentumBuffers();
  /// Whether a step (or momentumBuffers(), or load()) gave the optimizer momentum state: SGD's "state is not empty".
  bool hasMomentumState() const { return hasMomentum_; }
  /// Forgets the momentum state: the next step starts it again from the gradient, as SGD's first step does.
  void dropMomentumState() { hasMomentum_ = false; }

 private:
  const torch::optim::SGDOptions& sgdOptions() const;
  /// Parameter i's part of `flat`, shaped as the parameter.
  torch::Tensor slot(const torch::Tensor& flat, size_t i) const;
  /// Where parameter i's part of `flat` starts.
  const void* address(const torch::Tensor& flat, size_t i) const;
  /// Puts back into the flat buffers any parameter data or `.grad` that left them (a `set_` on load, a zero_grad
  /// that set the gradients to none), values kept. `requireGrads`: throw for a parameter with no `.grad`.
  void keepInFlatBuffers(bool requireGrads);
  const torch::Tensor& momentum();

  std::vector<torch::Tensor> params_;
  std::vector<int64_t> offsets_;  ///< element offset of each parameter in the flat buffers
  torch::Tensor flatParams_;      ///< the parameters' data
  torch::Tensor flatGrads_;       ///< their gradients
  torch::Tensor flatMomentum_;    ///< SGD's momentum buffers (made at the first step with momentum)
  torch::Tensor decayedGrads_;    ///< gradient + weight decay × parameter (made at the first step with decay)
  bool hasMomentum_ = false;
};

}  // namespace ddprun::worker
