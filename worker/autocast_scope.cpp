#include "worker/autocast_scope.hpp"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

// LibTorch 2.4 generalised autocast to device types (at::autocast::set_autocast_enabled(DeviceType, bool),
// set_autocast_dtype(DeviceType, ScalarType)) and deprecated the CUDA/CPU-specific pairs used before.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define DDPRUN_AUTOCAST_PER_DEVICE_TYPE 1
#endif

namespace ddprun::worker {
namespace {

bool isEnabled(c10::DeviceType type) {
#ifdef DDPRUN_AUTOCAST_PER_DEVICE_TYPE
  return at::autocast::is_autocast_enabled(type);
#else
  return type == c10::DeviceType::CUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
#endif
}

void setEnabled(c10::DeviceType type, bool enabled) {
#ifdef DDPRUN_AUTOCAST_PER_DEVICE_TYPE
  at::autocast::set_autocast_enabled(type, enabled);
#else
  if (type == c10::DeviceType::CUDA) {
    at::autocast::set_enabled(enabled);
  } else {
    at::autocast::set_cpu_enabled(enabled);
  }
#endif
}

at::ScalarType getDtype(c10::DeviceType type) {
#ifdef DDPRUN_AUTOCAST_PER_DEVICE_TYPE
  return at::autocast::get_autocast_dtype(type);
#else
  return type == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype()
                                       : at::autocast::get_autocast_cpu_dtype();
#endif
}

void setDtype(c10::DeviceType type, at::ScalarType dtype) {
#ifdef DDPRUN_AUTOCAST_PER_DEVICE_TYPE
  at::autocast::set_autocast_dtype(type, dtype);
#else
  if (type == c10::DeviceType::CUDA) {
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
#endif
}

}  // namespace

AutocastScope::AutocastScope(const torch::Device& device, bool enabled) : active_(enabled), type_(device.type()) {
  if (!active_) return;
  wasEnabled_ = isEnabled(type_);
  previousDtype_ = getDtype(type_);
  setDtype(type_, at::kBFloat16);
  setEnabled(type_, true);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  setEnabled(type_, wasEnabled_);
  setDtype(type_, previousDtype_);
}

bool autocastEnabled(const torch::Device& device) { return isEnabled(device.type()); }

}  // namespace ddprun::worker
