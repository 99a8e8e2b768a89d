#pragma once
// Counting the GPUs a worker group can use, without LibTorch or CUDA.
#include <optional>
#include <string>

namespace ddprun::launcher {

/// GPUs visible to workers: CUDA_VISIBLE_DEVICES when set (a comma list, counted up to its first invalid
/// entry as CUDA does; "-1" means none),
/// else the entries of /proc/driver/nvidia/gpus (`procDir`, for tests). 0 when there is no NVIDIA driver.
int countVisibleGpus(const std::string& procDir = "/proc/driver/nvidia/gpus");

/// Resolves --nproc-per-node as torchrun does (torch/distributed/run.py): a positive integer, "cpu" (the
/// CPU count `cpuCount`), "gpu" (the GPU count, an error when 0), or "auto" (GPUs if any, else CPUs).
/// Throws ConfigError naming the value.
int resolveNprocPerNode(const std::string& value, int gpuCount, int cpuCount);

}  // namespace ddprun::launcher
