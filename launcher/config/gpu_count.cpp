#include "launcher/config/gpu_count.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <vector>

#include "common/env.hpp"
#include "common/error.hpp"

namespace ddprun::launcher {
namespace {

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

/// The leading number of an entry as strtoul reads it (after spaces and a sign); -1 when it has none or is negative.
long long leadingOrdinal(const std::string& entry) {
  size_t at = entry.find_first_not_of(" \t");
  if (at == std::string::npos) return -1;
  bool negative = false;
  if (entry[at] == '+' || entry[at] == '-') negative = entry[at++] == '-';
  const size_t digits = entry.find_first_not_of("0123456789", at);
  const std::string number = entry.substr(at, digits == std::string::npos ? std::string::npos : digits - at);
  if (number.empty() || number.size() > 9) return -1;
  return negative ? -1 : std::stoll(number);
}

/// The GPUs the driver knows (the proc dir, else nvidia-smi -L); -1 when neither answers.
int physicalGpus(const std::string& procDir, const std::string& nvidiaSmi, std::string& source) {
  std::error_code ec;
  if (std::filesystem::is_directory(procDir, ec)) {
    int count = 0;
    for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(procDir, ec)) ++count;
    source = procDir;
    return count;
  }
  const int listed = countGpusInNvidiaSmiList(runNvidiaSmiList(nvidiaSmi));
  if (listed > 0) {
    source = nvidiaSmi + " -L";
    return listed;
  }
  source = "none found (no CUDA_VISIBLE_DEVICES, " + procDir + " nor " + nvidiaSmi + ")";
  return -1;
}

}  // namespace

GpuCount countCudaVisibleDevices(const std::string& visible, int physical) {
  GpuCount counted{0, "CUDA_VISIBLE_DEVICES", ""};
  const std::string shown = "CUDA_VISIBLE_DEVICES=" + visible;
  std::vector<std::string> entries;
  std::stringstream list(visible);
  for (std::string item; std::getline(list, item, ',');) entries.push_back(item);
  const bool uuids = visible.rfind("GPU-", 0) == 0 || visible.rfind("MIG-", 0) == 0;
  std::vector<std::string> seen;
  for (const auto& entry : entries) {
    std::string key = entry;
    if (!uuids) {
      const long long ordinal = leadingOrdinal(entry);
      if (ordinal < 0) {
        if (visible != "-1" && !visible.empty()) {
          counted.warning = shown + ": CUDA stops at the entry '" + entry + "' and shows " +
                            std::to_string(counted.count) + " GPU(s)";
        }
        break;
      }
      if (physical >= 0 && ordinal >= physical) {
        counted.warning = shown + ": this machine has " + std::to_string(physical) + " GPU(s), so CUDA stops at " +
                          std::to_string(ordinal) + " and shows " + std::to_string(counted.count);
        break;
      }
      key = std::to_string(ordinal);
    }
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
      counted.count = 0;
      counted.warning = shown + " names GPU " + key + " twice: CUDA then shows no GPU at all";
      return counted;
    }
    seen.push_back(key);
    ++counted.count;
  }
  return counted;
}

int countGpusInNvidiaSmiList(const std::string& output) {
  std::istringstream in(output);
  int count = 0;
  for (std::string line; std::getline(in, line);) count += line.rfind("GPU ", 0) == 0;
  return count;
}

GpuCount detectGpus(const std::string& procDir, const std::string& nvidiaSmi) {
  std::string source;
  // Set but empty hides every GPU in CUDA, unlike most variables, so getenv and not getEnv.
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    return countCudaVisibleDevices(visible, physicalGpus(procDir, nvidiaSmi, source));
  }
  const int physical = physicalGpus(procDir, nvidiaSmi, source);
  return {std::max(physical, 0), source, ""};
}

int countVisibleGpus(const std::string& procDir, const std::string& nvidiaSmi) {
  return detectGpus(procDir, nvidiaSmi).count;
}

}  // namespace ddprun::launcher
