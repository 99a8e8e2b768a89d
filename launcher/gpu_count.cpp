#include "launcher/gpu_count.hpp"

#include <filesystem>
#include <sstream>

#include "common/env.hpp"
#include "common/error.hpp"

namespace ddprun::launcher {

int countVisibleGpus(const std::string& procDir) {
  if (auto visible = getEnv("CUDA_VISIBLE_DEVICES")) {
    if (*visible == "-1") return 0;
    int count = 0;
    std::stringstream list(*visible);
    std::string item;
    // CUDA stops enumerating at the first invalid entry ("0,-1,2" shows one device).
    while (std::getline(list, item, ',')) {
      if (item.empty() || item[0] == '-') break;
      ++count;
    }
    return count;
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(procDir, ec)) return 0;
  int count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(procDir, ec)) ++count;
  return count;
}

int resolveNprocPerNode(const std::string& value, int gpuCount, int cpuCount) {
  if (value == "cpu") return cpuCount;
  if (value == "auto") return gpuCount > 0 ? gpuCount : cpuCount;
  if (value == "gpu") {
    if (gpuCount == 0) throw ConfigError("--nproc-per-node gpu: no GPU is visible (CUDA_VISIBLE_DEVICES, /proc/driver/nvidia)");
    return gpuCount;
  }
  int64_t n = parseInt(value, "--nproc-per-node");
  if (n < 1 || n > 4096) throw ConfigError("--nproc-per-node: expected 1..4096, cpu, gpu or auto, got '" + value + "'");
  return static_cast<int>(n);
}

}  // namespace ddprun::launcher
