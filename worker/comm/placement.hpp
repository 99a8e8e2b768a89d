#pragma once
// Where a rank trains and how its gradients travel: the device (CPU or cuda:N) and the backend (a row of
// comm/backends.hpp), resolved from --device/--backend, the build, the visible GPUs and LOCAL_RANK.
// LibTorch-free, so the rules are unit-tested without a GPU.
#include <string>

#include "worker/comm/backends.hpp"

namespace ddprun::worker {

/// --device values.
enum class DeviceKind { kAuto, kCpu, kCuda };

/// Parses "auto", "cpu" or "cuda"; throws FlagError otherwise.
DeviceKind parseDeviceKind(const std::string& name);

/// The resolved placement of one rank.
struct Placement {
  BackendKind backend = BackendKind::kGloo;  ///< never kAuto
  bool autoBackend = false;                  ///< chosen by --backend auto (shm may then become Gloo)
  bool cuda = false;                         ///< train on cuda:deviceIndex, else on the CPU
  int deviceIndex = -1;                      ///< CUDA device index; -1 on the CPU
  bool sharedGpu = false;                    ///< more local ranks than GPUs: this rank shares its GPU (Gloo only)
  bool processGroup = false;                 ///< form a c10d process group (and run the gradient reducer)

  /// "cpu" or "cuda:N".
  std::string deviceName() const;
};

/// What the build and the machine offer.
struct DeviceFacts {
  bool cudaBuilt = false;  ///< compiled with DDPRUN_WITH_CUDA against a CUDA LibTorch
  int gpuCount = 0;        ///< CUDA devices visible to this process (0 when not built with CUDA)
  bool glooBuilt = true;   ///< compiled with Gloo (DDPRUN_WITH_GLOO): a pip torch may lack its headers
};

/// Resolves the placement as torchrun users expect it:
/// - device auto: CUDA when built with it and a GPU is visible, else the CPU;
/// - backend auto: NCCL on CUDA, shm on the CPU (the shm factory uses plain Gloo instead when no host has
///   two ranks); a backend that cannot reduce CUDA tensors (shm) keeps device auto on the CPU;
/// - GPU index = LOCAL_RANK; with more local ranks than GPUs, Gloo ranks share GPUs (LOCAL_RANK mod the
///   count), NCCL refuses (it cannot run two ranks of one communicator on one GPU);
/// - a process group is formed when WORLD_SIZE > 1, or when --backend is named explicitly (as
///   init_process_group does with one rank), so one rank can exercise the real NCCL or Gloo path.
/// Throws FlagError naming the flag when the request cannot be met (CUDA asked for in a CPU build or
/// on a machine without a visible GPU, NCCL on the CPU, a CPU-only backend on CUDA, an NCCL rank without a GPU of its
/// own, a Gloo process group in a build without Gloo).
Placement resolvePlacement(BackendKind backend, DeviceKind device, const DeviceFacts& facts, int localRank,
                           int worldSize);

}  // namespace ddprun::worker
