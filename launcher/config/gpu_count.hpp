#pragma once
// Counting the GPUs a worker group can use, without LibTorch or CUDA.
#include <optional>
#include <string>

namespace ddprun::launcher {

/// A GPU count and where it came from (for the log line).
struct GpuCount {
  int count = 0;
  std::string source;  ///< "CUDA_VISIBLE_DEVICES", the proc dir, "nvidia-smi -L", or "none found"
};

/// GPUs visible to workers, from the first source that answers:
/// 1. CUDA_VISIBLE_DEVICES when set: a comma list counted up to its first invalid entry as CUDA does
///    ("-1" or an empty value hide every GPU);
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
