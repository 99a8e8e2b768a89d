// --numa-binding on a fake /sys: which CPUs and memory node each rank gets.
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "common/error.hpp"
#include "launcher/process/numa_binding.hpp"
#include "support/child_process.hpp"

namespace ddprun::launcher {
namespace fs = std::filesystem;
namespace {

/// A fake /sys: `nodes` NUMA nodes of `perNode` CPUs each, `sockets` sockets, L3 caches of `perL3` CPUs, and NVIDIA
/// GPUs on the given nodes (in PCI order).
std::string fakeSys(int nodes, int perNode, int sockets, int perL3, const std::vector<int>& gpuNodes) {
  const std::string root = test::makeTempDir("sysfs");
  for (int node = 0; node < nodes; ++node) {
    const std::string dir = root + "/devices/system/node/node" + std::to_string(node);
    fs::create_directories(dir);
    std::ofstream(dir + "/cpulist") << node * perNode << "-" << (node + 1) * perNode - 1 << "\n";
  }
  const int cpus = nodes * perNode;
  for (int cpu = 0; cpu < cpus; ++cpu) {
    const std::string dir = root + "/devices/system/cpu/cpu" + std::to_string(cpu);
    fs::create_directories(dir + "/topology");
    fs::create_directories(dir + "/cache/index3");
    std::ofstream(dir + "/topology/physical_package_id") << cpu / (cpus / sockets) << "\n";
    const int l3 = cpu / perL3;
    std::ofstream(dir + "/cache/index3/shared_cpu_list") << l3 * perL3 << "-" << (l3 + 1) * perL3 - 1 << "\n";
  }
  for (size_t gpu = 0; gpu < gpuNodes.size(); ++gpu) {
    const std::string dir = root + "/bus/pci/devices/0000:" + std::to_string(10 + gpu) + ":00.0";
    fs::create_directories(dir);
    std::ofstream(dir + "/vendor") << "0x10de\n";
    std::ofstream(dir + "/class") << "0x030200\n";
    std::ofstream(dir + "/numa_node") << gpuNodes[gpu] << "\n";
  }
  const std::string nic = root + "/bus/pci/devices/0000:05:00.0";  // not a GPU
  fs::create_directories(nic);
  std::ofstream(nic + "/vendor") << "0x15b3\n";
  std::ofstream(nic + "/class") << "0x020700\n";
  return root;
}

TEST(NumaBinding, EachRankGetsTheCpusAndMemoryOfItsGpusNode) {
  // 4 nodes of 8 CPUs on 2 sockets, L3 caches of 4 CPUs; GPUs 0-3 on nodes 1, 0, 3, 2.
  const std::string sys = fakeSys(4, 8, 2, 4, {1, 0, 3, 2});
  const NumaTopology topology = readNumaTopology(sys);
  ASSERT_EQ(topology.nodes.size(), 4u);
  EXPECT_EQ(topology.gpuNodes, (std::vector<int>{1, 0, 3, 2})) << "the network card is not a GPU";
  EXPECT_EQ(topology.nodes[2].socket, 1);
  ASSERT_EQ(topology.nodes[0].l3Groups.size(), 2u);
  const auto node = planNumaBinding("node", topology, 4);
  ASSERT_EQ(node.size(), 4u);
  EXPECT_EQ(formatCpuList(node[0].cpus), "8-15");
  EXPECT_EQ(node[0].memoryNode, 1);
  EXPECT_EQ(formatCpuList(node[2].cpus), "24-31");
  const auto socket = planNumaBinding("socket", topology, 4);
  EXPECT_EQ(formatCpuList(socket[0].cpus), "0-15") << "node 1 is on socket 0 with node 0";
  EXPECT_EQ(formatCpuList(socket[3].cpus), "16-31");
  // Eight ranks on four GPUs: two per GPU; exclusive halves each node, core-complex gives each an L3 domain.
  const auto exclusive = planNumaBinding("exclusive", topology, 8);
  EXPECT_EQ(formatCpuList(exclusive[0].cpus), "8-11");
  EXPECT_EQ(formatCpuList(exclusive[4].cpus), "12-15") << "rank 4 uses GPU 0 again";
  EXPECT_TRUE(sharedCpus(exclusive).empty());
  // 40 ranks on those four nodes of 8 CPUs: ten per node, more than its CPUs; the shared ones are named (issue 58:
  // they were shared without a word).
  const auto crowded = planNumaBinding("exclusive", topology, 40);
  EXPECT_FALSE(sharedCpus(crowded).empty());
  const auto complexes = planNumaBinding("core-complex", topology, 8);
  EXPECT_EQ(formatCpuList(complexes[1].cpus), "0-3");
  EXPECT_EQ(formatCpuList(complexes[5].cpus), "4-7");
  fs::remove_all(sys);
}

TEST(NumaBinding, OnlyTheCpusDdprunMayRunOnAreUsedAsTorchDoes) {
  // `taskset -c 9-12 ddprun …` on 4 nodes of 8 CPUs: every node's CPUs are cut to that set (torch 2.x intersects with
  // os.sched_getaffinity(0)); a rank whose node keeps none is an error naming it.
  const std::string sys = fakeSys(4, 8, 2, 4, {1, 0, 3, 2});
  const NumaTopology topology = restrictToCpus(readNumaTopology(sys), {9, 10, 11, 12});
  const auto node = planNumaBinding("node", topology, 1);
  EXPECT_EQ(formatCpuList(node[0].cpus), "9-12");
  const auto complexes = planNumaBinding("core-complex", topology, 1);
  EXPECT_EQ(formatCpuList(complexes[0].cpus), "9-11") << "the first L3 domain of node 1 that is left";
  try {
    planNumaBinding("node", topology, 2);  // local rank 1 uses GPU 1, on node 0: none of 9-12
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("local rank 1's NUMA node 0 has none of the CPUs ddprun may run on"),
              std::string::npos)
        << e.what();
  }
  fs::remove_all(sys);
}

TEST(NumaBinding, WithoutGpusRanksAreSpreadOverTheNodesInBlocks) {
  const std::string sys = fakeSys(2, 4, 2, 4, {});
  const auto plan = planNumaBinding("node", readNumaTopology(sys), 4);
  ASSERT_EQ(plan.size(), 4u);
  EXPECT_EQ(plan[0].memoryNode, 0);
  EXPECT_EQ(plan[1].memoryNode, 0);
  EXPECT_EQ(plan[2].memoryNode, 1);
  EXPECT_EQ(formatCpuList(plan[3].cpus), "4-7");
  // A machine with no NUMA information at all is one node of every CPU.
  const std::string empty = test::makeTempDir("nosys");
  const auto flat = readNumaTopology(empty);
  ASSERT_EQ(flat.nodes.size(), 1u);
  EXPECT_EQ(flat.nodes[0].cpus.size(), static_cast<size_t>(::sysconf(_SC_NPROCESSORS_ONLN)));
  EXPECT_EQ(parseCpuList("0-2,5"), (std::vector<int>{0, 1, 2, 5}));
  EXPECT_TRUE(parseCpuList("x").empty());
  fs::remove_all(sys);
  fs::remove_all(empty);
}

}  // namespace
}  // namespace ddprun::launcher
