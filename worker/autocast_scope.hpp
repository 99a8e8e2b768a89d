#pragma once
// --amp: bf16 autocast around the forward pass and the loss, as Python's
// `with torch.autocast(device_type, dtype=torch.bfloat16):` does. Parameters, gradients, the gradient
// buckets and the optimizer stay float32; matmuls and convolutions run in bf16 (on CUDA: tensor cores).
// The C++ autocast API changed in LibTorch 2.4 (per-device-type functions replaced the CUDA/CPU pairs);
// both spellings live in autocast_scope.cpp.
#include <torch/torch.h>

namespace ddprun::worker {

/// Enables bf16 autocast for `device`'s type (CPU or CUDA) on the calling thread for the scope's
/// lifetime when `enabled`; does nothing otherwise. On exit it restores the previous state and, like
/// Python's context manager, clears the cache of casted weights when the outermost scope closes (a stale
/// cache would feed the next step last step's weights). Not copyable; nest freely.
class AutocastScope {
 public:
  AutocastScope(const torch::Device& device, bool enabled);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool active_ = false;
  c10::DeviceType type_ = c10::DeviceType::CPU;
  bool wasEnabled_ = false;
  at::ScalarType previousDtype_ = at::kFloat;
};

/// True when autocast is on for `device`'s type on this thread (for tests and the start-up log).
bool autocastEnabled(const torch::Device& device);

}  // namespace ddprun::worker
