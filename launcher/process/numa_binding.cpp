#include "launcher/process/numa_binding.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "common/error.hpp"

namespace ddprun::launcher {
namespace {
namespace fs = std::filesystem;

std::string readLine(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

int readInt(const fs::path& path, int fallback) {
  const std::string text = readLine(path);
  try {
    return text.empty() ? fallback : std::stoi(text, nullptr, 0);
  } catch (const std::exception&) {
    return fallback;
  }
}

/// NVIDIA's PCI vendor id; display (0x03xx) class devices are GPUs.
bool isNvidiaGpu(const fs::path& device) {
  return readLine(device / "vendor") == "0x10de" && readLine(device / "class").rfind("0x03", 0) == 0;
}

}  // namespace

std::vector<int> parseCpuList(const std::string& text) {
  std::vector<int> cpus;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    try {
      const auto dash = item.find('-');
      const int first = std::stoi(item.substr(0, dash));
      const int last = dash == std::string::npos ? first : std::stoi(item.substr(dash + 1));
      for (int cpu = first; cpu <= last && last - first < 65536; ++cpu) cpus.push_back(cpu);
    } catch (const std::exception&) {
      return {};
    }
  }
  return cpus;
}

std::string formatCpuList(const std::vector<int>& cpus) {
  std::string text;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    text += (text.empty() ? "" : ",") + std::to_string(cpus[i]) + (j > i ? "-" + std::to_string(cpus[j]) : "");
    i = j + 1;
  }
  return text;
}

NumaTopology readNumaTopology(const std::string& sysRoot) {
  NumaTopology topology;
  const fs::path root(sysRoot);
  std::error_code ec;
  std::map<int, NumaNode> nodes;
  for (fs::directory_iterator it(root / "devices/system/node", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("node", 0) != 0 || name.size() == 4 || !std::isdigit(static_cast<unsigned char>(name[4]))) continue;
    NumaNode node;
    node.id = std::stoi(name.substr(4));
    node.cpus = parseCpuList(readLine(it->path() / "cpulist"));
    if (!node.cpus.empty()) nodes[node.id] = node;
  }
  if (nodes.empty()) {
    NumaNode all;
    const long count = ::sysconf(_SC_NPROCESSORS_ONLN);
    for (int cpu = 0; cpu < std::max(1L, count); ++cpu) all.cpus.push_back(cpu);
    nodes[0] = all;
  }
  for (auto& [id, node] : nodes) {
    const fs::path cpuDir = root / "devices/system/cpu";
    node.socket = readInt(cpuDir / ("cpu" + std::to_string(node.cpus.front())) / "topology/physical_package_id", 0);
    std::map<std::string, std::vector<int>> byL3;
    for (int cpu : node.cpus) {
      const std::string shared = readLine(cpuDir / ("cpu" + std::to_string(cpu)) / "cache/index3/shared_cpu_list");
      byL3[shared.empty() ? "all" : shared].push_back(cpu);
    }
    for (auto& [key, cpus] : byL3) node.l3Groups.push_back(cpus);
    std::sort(node.l3Groups.begin(), node.l3Groups.end());
    topology.nodes.push_back(node);
  }
  std::vector<fs::path> gpus;
  for (fs::directory_iterator it(root / "bus/pci/devices", ec), end; !ec && it != end; it.increment(ec)) {
    if (isNvidiaGpu(it->path())) gpus.push_back(it->path());
  }
  std::sort(gpus.begin(), gpus.end());  // PCI address order, as nvidia-smi numbers them
  for (const auto& gpu : gpus) {
    const int node = readInt(gpu / "numa_node", -1);
    topology.gpuNodes.push_back(nodes.count(node) ? node : nodes.begin()->first);
  }
  return topology;
}

NumaTopology restrictToCpus(NumaTopology topology, const std::vector<int>& allowed) {
  if (allowed.empty()) return topology;
  const std::set<int> permitted(allowed.begin(), allowed.end());
  const auto keep = [&](std::vector<int>& cpus) {
    cpus.erase(std::remove_if(cpus.begin(), cpus.end(), [&](int cpu) { return permitted.count(cpu) == 0; }),
               cpus.end());
  };
  for (auto& node : topology.nodes) {
    keep(node.cpus);
    for (auto& group : node.l3Groups) keep(group);
    node.l3Groups.erase(std::remove_if(node.l3Groups.begin(), node.l3Groups.end(),
                                       [](const std::vector<int>& group) { return group.empty(); }),
                        node.l3Groups.end());
  }
  return topology;
}

std::vector<int> allowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return {};
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

std::vector<NumaBinding> planNumaBinding(const std::string& mode, const NumaTopology& topology, int nproc) {
  std::vector<NumaBinding> plan;
  if (topology.nodes.empty() || nproc <= 0) return plan;
  const auto nodeById = [&](int id) -> const NumaNode& {
    for (const auto& node : topology.nodes) {
      if (node.id == id) return node;
    }
    return topology.nodes.front();
  };
  // Each local rank's node: its GPU's, or blocks of ranks over the nodes.
  std::vector<int> rankNode;
  for (int rank = 0; rank < nproc; ++rank) {
    if (!topology.gpuNodes.empty()) {
      rankNode.push_back(topology.gpuNodes[static_cast<size_t>(rank) % topology.gpuNodes.size()]);
    } else {
      rankNode.push_back(
          topology.nodes[static_cast<size_t>(rank) * topology.nodes.size() / static_cast<size_t>(nproc)].id);
    }
  }
  for (int rank = 0; rank < nproc; ++rank) {
    const NumaNode& node = nodeById(rankNode[static_cast<size_t>(rank)]);
    if (node.cpus.empty() && mode != "socket") {
      throw Error("--numa-binding " + mode + ": local rank " + std::to_string(rank) + "'s NUMA node " +
                  std::to_string(node.id) + " has none of the CPUs ddprun may run on (" + formatCpuList(allowedCpus()) +
                  "); run ddprun on CPUs of that node, or without --numa-binding");
    }
    // This rank's place among the ranks on its node.
    int index = 0, sharing = 0;
    for (int other = 0; other < nproc; ++other) {
      if (rankNode[static_cast<size_t>(other)] != node.id) continue;
      if (other < rank) ++index;
      ++sharing;
    }
    NumaBinding binding;
    binding.memoryNode = node.id;
    if (mode == "socket") {
      for (const auto& each : topology.nodes) {
        if (each.socket == node.socket) binding.cpus.insert(binding.cpus.end(), each.cpus.begin(), each.cpus.end());
      }
      std::sort(binding.cpus.begin(), binding.cpus.end());
      if (binding.cpus.empty()) {
        throw Error("--numa-binding socket: local rank " + std::to_string(rank) + "'s socket has none of the CPUs " +
                    "ddprun may run on (" + formatCpuList(allowedCpus()) + "); run ddprun without --numa-binding");
      }
    } else if (mode == "exclusive") {
      const size_t count = node.cpus.size();
      const size_t parts = static_cast<size_t>(sharing);
      const size_t first = count * static_cast<size_t>(index) / parts;
      const size_t last = std::max(first + 1, count * static_cast<size_t>(index + 1) / parts);
      for (size_t i = first; i < last && i < count; ++i) binding.cpus.push_back(node.cpus[i]);
      if (binding.cpus.empty()) binding.cpus.push_back(node.cpus[static_cast<size_t>(index) % count]);
    } else if (mode == "core-complex") {
      binding.cpus = node.l3Groups[static_cast<size_t>(index) % node.l3Groups.size()];
    } else {  // node
      binding.cpus = node.cpus;
    }
    plan.push_back(binding);
  }
  return plan;
}

std::vector<int> sharedCpus(const std::vector<NumaBinding>& plan) {
  std::map<int, int> uses;
  for (const auto& binding : plan) {
    for (int cpu : binding.cpus) ++uses[cpu];
  }
  std::vector<int> shared;
  for (const auto& [cpu, count] : uses) {
    if (count > 1) shared.push_back(cpu);
  }
  return shared;
}

}  // namespace ddprun::launcher
