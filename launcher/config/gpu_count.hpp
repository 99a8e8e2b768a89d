#pragma once
// Counting the GPUs a worker group can use, without LibTorch or CUDA.
#include <optional>
#include <string>

namespace ddprun::launcher {

/// A GPU count and where it came from (for the log line).
struct GpuCount {
  int count = 0;
  std::string source;        ///< "CUDA_VISIBLE_DEVICES", the proc dir, "nvidia-smi -L", or "none found"
  std::string warning = {};  ///< when CUDA_VISIBLE_DEVICES names GPUs CUDA would not show (one line; "" when none)
};

/// CUDA_VISIBLE_DEVICES counted as CUDA and torch count it (torch/cuda/__init__.py, _parse_visible_devices and
/// _device_count_nvml): each entry is read as its leading number ("1gpu" is 1); a negative or unreadable entry ends
/// the list ("0,-1,2" shows one GPU; "-1" and "" none); a GPU named twice makes CUDA show none at all ("0,0"); an
/// ordinal past the machine's `physical` GPUs (when known, >= 0) ends the list ("0,7" on one GPU shows one).
/// GPU-/MIG- UUIDs count one each (a repeated one: none). `warning` says what CUDA drops, except for "" and "-1",
/// the usual ways to hide every GPU.
GpuCount countCudaVisibleDevices(const std::string& visible, int physical);

/// GPUs visible to workers, from the first source that answers:
/// 1. CUDA_VISIBLE_DEVICES when set, counted as CUDA counts it (countCudaVisibleDevices), against the GPUs the
///    driver lists (2, 3) where it lists any;
/// 2. the entries of /proc/driver/nvidia/gpus (`procDir`, for tests), one per GPU the driver knows;
/// 3. the "GPU <n>: …" lines of `<nvidiaSmi> -L` (containers may lack the proc dir but ship nvidia-smi;
///    `nvidiaSmi` is a command name or path, for tests).
/// A count of 0 when none answers (no NVIDIA driver).
GpuCount detectGpus(const std::string& procDir = "/proc/driver/nvidia/gpus",
                    const std::string& nvidiaSmi = "nvidia-smi");

/// detectGpus(procDir, nvidiaSmi).count.
int countVisibleGpus(const std::string& procDir = "/proc/driver/nvidia/gpus",
                     const std::string& nvidiaSmi = "nvidia-smi");

/// The number of GPUs in `nvidia-smi -L` output: lines starting with "GPU " (MIG lines are indented and
/// belong to their GPU).
int countGpusInNvidiaSmiList(const std::string& output);

}  // namespace ddprun::launcher
