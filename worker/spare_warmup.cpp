#include "worker/spare_warmup.hpp"

#include <malloc.h>
#include <torch/torch.h>

#include <algorithm>

#include "worker/flat_sgd.hpp"
#include "worker/models.hpp"

namespace ddprun::worker {

namespace {

/// Keeps what the warm-up frees in the heap, its pages mapped: by default glibc gives every allocation over 128 KiB
/// its own mmap and returns it at free, so the claimed rank's first allocations (the state it receives, its first
/// gradients) would fault in every page again. A fault costs tens of microseconds on a VM: 8 ms for the 1.6 MB of
/// the MLP's state alone. The spare's own heap only; bounded by its peak, as in any long-running process.
void keepFreedMemoryMapped() {
  ::mallopt(M_MMAP_THRESHOLD, 32 << 20);   // glibc's maximum on 64-bit
  ::mallopt(M_TRIM_THRESHOLD, 256 << 20);  // a free at the heap's top no longer returns pages
}

}  // namespace

void warmUpSpareRank(const WorkerOptions& options, const Dataset& data) {
  const int64_t batch = std::min<int64_t>(options.batchSize, data.train.size());
  if (batch <= 0) return;
  keepFreedMemoryMapped();
  // The rank seeds the generator itself once claimed; the model's initialisation here must not move it anyway.
  const torch::Tensor generatorState = at::detail::getDefaultCPUGenerator().get_state();
  auto model = makeModel(options.model);
  FlatSgd optimizer(model->parameters(), torch::optim::SGDOptions(options.lr).momentum(options.momentum));
  const torch::Tensor images = data.train.images.narrow(0, 0, batch);
  const torch::Tensor labels = data.train.labels.narrow(0, 0, batch);
  optimizer.zeroGrad();
  torch::nn::functional::cross_entropy(model->forward(images), labels).backward();
  optimizer.step();
  // The claimed rank builds its model, optimizer state and gradients again, and the state exchange concatenates
  // parameters and momentum buffers into one tensor (tensor_broadcast.cpp): room for all of it is touched once here
  // and stays in the heap.
  int64_t stateElements = 0;
  for (const auto& p : model->parameters()) stateElements += p.numel();
  (void)torch::ones({4 * stateElements});
  at::Generator cpu = at::detail::getDefaultCPUGenerator();  // shares the global generator
  cpu.set_state(generatorState);
}

}  // namespace ddprun::worker
