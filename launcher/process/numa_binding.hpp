#pragma once
// --numa-binding (torchrun 2.x, torch/numa/binding.py): each local rank runs on the CPUs near its GPU and takes
// its memory there. The machine's layout comes from sysfs (the NUMA nodes and their CPUs, each CPU's socket and
// L3 cache, each NVIDIA GPU's node); planning is pure, so tests give it fake sysfs trees.
//   node          the CPUs of the GPU's NUMA node
//   socket        the CPUs of every NUMA node on the GPU's socket
//   exclusive     the GPU's node's CPUs, shared out among the ranks on that node without overlap
//   core-complex  one L3 cache domain (core complex) of the GPU's node per rank, distinct while there are enough
// Without GPUs, local rank r is placed on NUMA node r * nodes / nproc (ranks spread over the nodes in blocks).
// The memory policy prefers the rank's node (MPOL_PREFERRED): allocation never fails for it.
#include <string>
#include <vector>

namespace ddprun::launcher {

/// One NUMA node as sysfs shows it.
struct NumaNode {
  int id = 0;
  std::vector<int> cpus;                   ///< online CPUs
  int socket = 0;                          ///< physical package of its first CPU
  std::vector<std::vector<int>> l3Groups;  ///< its CPUs grouped by shared L3 cache (one group when unknown)
};

struct NumaTopology {
  std::vector<NumaNode> nodes;  ///< by id
  std::vector<int> gpuNodes;    ///< for each NVIDIA GPU in PCI order, its NUMA node
};

/// Reads /sys (or a tree laid out like it). A machine without NUMA information is one node with every CPU.
NumaTopology readNumaTopology(const std::string& sysRoot = "/sys");

/// The topology restricted to the CPUs ddprun may run on (`taskset -c 1 ddprun …`, a cgroup's cpuset), as torch 2.x
/// intersects each node's CPUs with os.sched_getaffinity(0) (torch/numa/binding.py); a node may be left without CPUs.
NumaTopology restrictToCpus(NumaTopology topology, const std::vector<int>& allowed);

/// The CPUs the calling thread may run on (sched_getaffinity); empty when the kernel does not say.
std::vector<int> allowedCpus();

/// Where one local rank runs.
struct NumaBinding {
  std::vector<int> cpus;
  int memoryNode = -1;
};

/// The binding of each of `nproc` local ranks for `mode` (node, socket, exclusive, core-complex). Local rank r
/// uses GPU r (mod the GPUs there are). Throws ddprun::Error naming the rank when its node has no CPU to run on
/// (torch 2.x raises "Must bind to a non-empty set of CPU indices").
std::vector<NumaBinding> planNumaBinding(const std::string& mode, const NumaTopology& topology, int nproc);

/// The CPUs that more than one rank of `plan` runs on, ascending: none for exclusive while every node has a CPU per
/// rank.
std::vector<int> sharedCpus(const std::vector<NumaBinding>& plan);

/// "0-3,8" for a CPU list (for logs).
std::string formatCpuList(const std::vector<int>& cpus);

/// Parses sysfs's "0-3,8-11" lists; an empty or malformed text gives no CPUs.
std::vector<int> parseCpuList(const std::string& text);

}  // namespace ddprun::launcher
