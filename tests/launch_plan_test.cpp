// Resolving what was asked against the machine: the worker count, GPUs as CUDA counts them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "common/error.hpp"
#include "launcher/config/gpu_count.hpp"
#include "launcher/config/launch_config.hpp"
#include "launcher/config/launch_plan.hpp"
#include "support/child_process.hpp"
#include "support/launch_args.hpp"

namespace ddprun::launcher {
namespace fs = std::filesystem;
namespace {

TEST(GpuCount, HonoursCudaVisibleDevicesThenTheDriver) {
  const std::string dir = test::makeTempDir("gpus");
  for (const char* gpu : {"0000:01:00.0", "0000:02:00.0", "0000:03:00.0"}) fs::create_directories(dir + "/" + gpu);
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(countVisibleGpus(dir), 3);
  // No driver directory and no nvidia-smi (a missing program, not the machine's: this test may run on a GPU host).
  EXPECT_EQ(countVisibleGpus(dir + "/absent", dir + "/no-nvidia-smi"), 0);
  ::setenv("CUDA_VISIBLE_DEVICES", "2,0", 1);
  EXPECT_EQ(countVisibleGpus(dir), 2);
  ::setenv("CUDA_VISIBLE_DEVICES", "", 1);
  EXPECT_EQ(countVisibleGpus(dir), 0);  // set but empty hides every GPU in CUDA
  ::setenv("CUDA_VISIBLE_DEVICES", "0,-1,2", 1);
  EXPECT_EQ(countVisibleGpus(dir), 1);  // CUDA stops at the first invalid entry
  ::setenv("CUDA_VISIBLE_DEVICES", "-1", 1);
  EXPECT_EQ(countVisibleGpus(dir), 0);
  // As CUDA and torch count (torch/cuda/__init__.py): a GPU named twice shows none; an ordinal past the machine's
  // GPUs ends the list; an entry counts by its leading number; each with one warning, but the usual "-1" and "".
  ::setenv("CUDA_VISIBLE_DEVICES", "0,0", 1);
  GpuCount twice = detectGpus(dir);
  EXPECT_EQ(twice.count, 0);
  EXPECT_EQ(twice.warning, "CUDA_VISIBLE_DEVICES=0,0 names GPU 0 twice: CUDA then shows no GPU at all");
  ::setenv("CUDA_VISIBLE_DEVICES", "0,7", 1);
  GpuCount past = detectGpus(dir);
  EXPECT_EQ(past.count, 1);
  EXPECT_EQ(past.warning, "CUDA_VISIBLE_DEVICES=0,7: this machine has 3 GPU(s), so CUDA stops at 7 and shows 1");
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(countCudaVisibleDevices("1gpu2,2ampere", -1).count, 2);
  EXPECT_EQ(countCudaVisibleDevices("0,7", -1).count, 2) << "no driver to say how many there are";
  EXPECT_EQ(countCudaVisibleDevices("-1", 4).warning, "");
  EXPECT_EQ(countCudaVisibleDevices("", 4).warning, "");
  EXPECT_EQ(countCudaVisibleDevices("GPU-aa,GPU-bb", 2).count, 2);
  EXPECT_EQ(countCudaVisibleDevices("GPU-aa,GPU-aa", 2).count, 0);
  EXPECT_EQ(countCudaVisibleDevices("0,x", 2).warning,
            "CUDA_VISIBLE_DEVICES=0,x: CUDA stops at the entry 'x' and shows 1 GPU(s)");
  EXPECT_EQ(resolveNprocPerNode("gpu", 4, 2), 4);
  EXPECT_EQ(resolveNprocPerNode("auto", 0, 2), 2);
  EXPECT_EQ(resolveNprocPerNode("cpu", 4, 16), 16);
  EXPECT_EQ(resolveNprocPerNode("3", 0, 2), 3);
  EXPECT_THROW(resolveNprocPerNode("gpu", 0, 2), ConfigError);
  EXPECT_THROW(resolveNprocPerNode("0", 0, 2), ConfigError);
  EXPECT_THROW(resolveNprocPerNode("two", 0, 2), ConfigError);
  EXPECT_EQ(resolveNprocPerNode("4096", 0, 2), 4096);
  EXPECT_THROW(resolveNprocPerNode("4097", 0, 2), ConfigError);
  fs::remove_all(dir);
}

TEST(LaunchPlan, OneBoundOnTheWorkerCountAndTheMachineDecidesAutoAndGpu) {
  // The option table and the resolution share kMaxNprocPerNode: 4096 passes both, 4097 neither.
  EXPECT_EQ(parse({"--nproc-per-node", "4097", "prog"}).exitCode, 2);
  EXPECT_EQ(parse({"--local-ranks-filter", "4096", "prog"}).exitCode, 2);
  auto args = parse({"--nproc-per-node", "4096", "prog"});
  ASSERT_TRUE(args.config.has_value());
  EXPECT_EQ(resolveLaunchPlan(*args.config, MachineFacts{{0, "none"}, 2}).nproc, 4096);
  args = parse({"--nproc-per-node", "auto", "prog"});
  ASSERT_TRUE(args.config.has_value());
  EXPECT_EQ(resolveLaunchPlan(*args.config, MachineFacts{{2, "fake"}, 16}).nproc, 2);
  EXPECT_EQ(resolveLaunchPlan(*args.config, MachineFacts{{0, "none"}, 16}).nproc, 16);
  args = parse({"--nproc-per-node", "gpu", "prog"});
  ASSERT_TRUE(args.config.has_value());
  EXPECT_THROW(resolveLaunchPlan(*args.config, MachineFacts{{0, "none"}, 16}), ConfigError);
  // --virtual-local-rank with fewer GPUs listed than workers: refused, as torch 2.x refuses it.
  args = parse({"--nproc-per-node", "2", "--virtual-local-rank", "prog"});
  ASSERT_TRUE(args.config.has_value());
  ::setenv("CUDA_VISIBLE_DEVICES", "3", 1);
  try {
    resolveLaunchPlan(*args.config, MachineFacts{{0, "none"}, 16});
    ADD_FAILURE() << "two workers on one listed GPU";
  } catch (const ConfigError& e) {
    EXPECT_NE(
        std::string(e.what()).find("--virtual-local-rank: local rank 1 exceeds the GPUs in CUDA_VISIBLE_DEVICES=3"),
        std::string::npos)
        << e.what();
  }
  ::setenv("CUDA_VISIBLE_DEVICES", "3,5", 1);
  EXPECT_EQ(resolveLaunchPlan(*args.config, MachineFacts{{0, "none"}, 16}).nproc, 2);
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(resolveLaunchPlan(*args.config, MachineFacts{{0, "none"}, 16}).nproc, 2) << "rank r uses GPU r";
  args = parse({"--nproc-per-node", "gpu", "prog"});
  ASSERT_TRUE(args.config.has_value());
  // The plan keeps every argument as it was given.
  const LaunchPlan plan = resolveLaunchPlan(*args.config, MachineFacts{{3, "fake"}, 16});
  EXPECT_EQ(plan.nprocPerNode, "gpu");
  EXPECT_EQ(plan.program, "prog");
  EXPECT_TRUE(plan.pythonInterpreter.empty()) << "no Python chosen when the machine's facts are given";
}

TEST(GpuCount, FallsBackToNvidiaSmiWhenTheDriverDirIsAbsent) {
  const std::string dir = test::makeTempDir("nvsmi");
  const std::string fake = dir + "/nvidia-smi";
  {
    std::ofstream script(fake);
    script << "#!/bin/sh\n[ \"$1\" = -L ] || exit 9\n"
           << "echo 'GPU 0: NVIDIA H200 (UUID: GPU-11111111-2222-3333-4444-555555555555)'\n"
           << "echo '  MIG 3g.71gb     Device  0: (UUID: MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee)'\n"
           << "echo 'GPU 1: NVIDIA H200 (UUID: GPU-66666666-7777-8888-9999-000000000000)'\n";
  }
  fs::permissions(fake, fs::perms::owner_all);
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  GpuCount found = detectGpus(dir + "/no-proc-dir", fake);
  EXPECT_EQ(found.count, 2);
  EXPECT_EQ(found.source, fake + " -L");
  found = detectGpus(dir + "/no-proc-dir", dir + "/absent-nvidia-smi");
  EXPECT_EQ(found.count, 0);
  EXPECT_NE(found.source.find("none found"), std::string::npos) << found.source;
  ::setenv("CUDA_VISIBLE_DEVICES", "0", 1);
  EXPECT_EQ(detectGpus(dir + "/no-proc-dir", fake).count, 1);  // the variable wins over the driver
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(countGpusInNvidiaSmiList("No devices were found\n"), 0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ddprun::launcher
