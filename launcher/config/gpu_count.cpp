#include "launcher/config/gpu_count.hpp"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "common/env.hpp"
#include "common/error.hpp"

namespace ddprun::launcher {
namespace {

int countCudaVisibleDevices(const std::string& visible) {
  if (visible == "-1") return 0;
  int count = 0;
  std::stringstream list(visible);
  std::string item;
  // CUDA stops enumerating at the first invalid entry ("0,-1,2" shows one device).
  while (std::getline(list, item, ',')) {
    if (item.empty() || item[0] == '-') break;
    ++count;
  }
  return count;
}

/// Output of `command -L` (stderr dropped), or "" when it cannot be run.
std::string runNvidiaSmiList(const std::string& command) {
  // The command is ours (a fixed name, or a test's path), never user input: popen's shell is safe here.
  FILE* pipe = ::popen(("'" + command + "' -L 2>/dev/null").c_str(), "r");
  if (pipe == nullptr) return "";
  std::string output;
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, n);
  ::pclose(pipe);
  return output;
}

}  // namespace

int countGpusInNvidiaSmiList(const std::string& output) {
  std::istringstream in(output);
  int count = 0;
  for (std::string line; std::getline(in, line);) count += line.rfind("GPU ", 0) == 0;
  return count;
}

GpuCount detectGpus(const std::string& procDir, const std::string& nvidiaSmi) {
  // Set but empty hides every GPU in CUDA, unlike most variables, so getenv and not getEnv.
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    return {countCudaVisibleDevices(visible), "CUDA_VISIBLE_DEVICES"};
  }
  std::error_code ec;
  if (std::filesystem::is_directory(procDir, ec)) {
    int count = 0;
    for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(procDir, ec)) ++count;
    return {count, procDir};
  }
  const int listed = countGpusInNvidiaSmiList(runNvidiaSmiList(nvidiaSmi));
  if (listed > 0) return {listed, nvidiaSmi + " -L"};
  return {0, "none found (no CUDA_VISIBLE_DEVICES, " + procDir + " nor " + nvidiaSmi + ")"};
}

int countVisibleGpus(const std::string& procDir, const std::string& nvidiaSmi) {
  return detectGpus(procDir, nvidiaSmi).count;
}

}  // namespace ddprun::launcher
