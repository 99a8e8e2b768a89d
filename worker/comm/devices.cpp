#include "worker/comm/devices.hpp"

#ifdef DDPRUN_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace ddprun::worker {

DeviceFacts probeDevices() {
  DeviceFacts facts;
#ifndef DDPRUN_WITH_GLOO
  facts.glooBuilt = false;
#endif
#ifdef DDPRUN_WITH_CUDA
  facts.cudaBuilt = true;
  facts.gpuCount = static_cast<int>(torch::cuda::device_count());
#endif
  return facts;
}

Placement placeRank(const DistEnv& env, BackendKind backend, DeviceKind device) {
  return resolvePlacement(backend, device, probeDevices(), env.localRank, env.worldSize);
}

void activateDevice([[maybe_unused]] const Placement& placement) {
#ifdef DDPRUN_WITH_CUDA
  if (placement.cuda) c10::cuda::set_device(static_cast<c10::DeviceIndex>(placement.deviceIndex));
#endif
}

torch::Device torchDevice(const Placement& placement) {
  if (!placement.cuda) return torch::kCPU;
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(placement.deviceIndex));
}

}  // namespace ddprun::worker
