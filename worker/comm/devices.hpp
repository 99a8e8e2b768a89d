#pragma once
// What this build and machine offer (CUDA, GPUs, Gloo), and the torch device of a placement. The only
// place outside the c10d communicator that touches CUDA; everything here compiles without a CUDA LibTorch.
#include <torch/torch.h>

#include "worker/comm/dist_env.hpp"
#include "worker/comm/placement.hpp"

namespace ddprun::worker {

/// What this build and machine offer: whether the worker was compiled with CUDA and Gloo, and how many CUDA
/// devices LibTorch sees (0 in a CPU build; the CUDA runtime honours CUDA_VISIBLE_DEVICES).
DeviceFacts probeDevices();

/// Resolves --backend/--device for this rank (see resolvePlacement) from probeDevices(), LOCAL_RANK and
/// WORLD_SIZE. Throws FlagError when the request cannot be met here.
Placement placeRank(const DistEnv& env, BackendKind backend, DeviceKind device);

/// Makes `placement`'s GPU the current CUDA device of this process (so NCCL, the caching allocator and
/// every kernel use it); nothing on the CPU.
void activateDevice(const Placement& placement);

/// The torch::Device for `placement`: torch::kCPU or cuda:deviceIndex.
torch::Device torchDevice(const Placement& placement);

}  // namespace ddprun::worker
