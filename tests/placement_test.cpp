// --device/--backend resolution for every build/machine combination (no GPU needed: the facts are given).
#include <gtest/gtest.h>

#include "common/error.hpp"
#include "worker/comm/placement.hpp"
#include "worker/options.hpp"

namespace ddprun::worker {
namespace {

const DeviceFacts kCpuBuild{false, 0};
const DeviceFacts kCudaBuildNoGpu{true, 0};
const DeviceFacts kOneGpu{true, 1};
const DeviceFacts kFourGpus{true, 4};

TEST(Placement, AutoPicksNcclOnCudaLocalRankAndShmOnTheCpu) {
  Placement p = resolvePlacement(BackendKind::kAuto, DeviceKind::kAuto, kFourGpus, 2, 4);
  EXPECT_EQ(p.backend, BackendKind::kNccl);
  EXPECT_TRUE(p.cuda);
  EXPECT_EQ(p.deviceIndex, 2);
  EXPECT_EQ(p.deviceName(), "cuda:2");
  EXPECT_FALSE(p.sharedGpu);
  EXPECT_TRUE(p.processGroup);

  for (const DeviceFacts& facts : {kCpuBuild, kCudaBuildNoGpu}) {
    p = resolvePlacement(BackendKind::kAuto, DeviceKind::kAuto, facts, 1, 2);
    EXPECT_EQ(p.backend, BackendKind::kShm);
    EXPECT_TRUE(p.autoBackend) << "so the shm factory may still pick Gloo when no host has two ranks";
    EXPECT_FALSE(p.cuda);
    EXPECT_EQ(p.deviceName(), "cpu");
  }
}

TEST(Placement, OneRankFormsAProcessGroupOnlyWhenTheBackendIsNamed) {
  EXPECT_FALSE(resolvePlacement(BackendKind::kAuto, DeviceKind::kAuto, kOneGpu, 0, 1).processGroup);
  EXPECT_FALSE(resolvePlacement(BackendKind::kAuto, DeviceKind::kCpu, kCpuBuild, 0, 1).processGroup);
  Placement p = resolvePlacement(BackendKind::kNccl, DeviceKind::kAuto, kOneGpu, 0, 1);
  EXPECT_TRUE(p.processGroup);
  EXPECT_EQ(p.backend, BackendKind::kNccl);
  EXPECT_EQ(p.deviceIndex, 0);
  EXPECT_TRUE(resolvePlacement(BackendKind::kGloo, DeviceKind::kAuto, kCpuBuild, 0, 1).processGroup);
}

TEST(Placement, GlooRanksShareGpusWhenThereAreMoreRanksThanGpus) {
  Placement p = resolvePlacement(BackendKind::kGloo, DeviceKind::kCuda, kOneGpu, 1, 2);
  EXPECT_EQ(p.backend, BackendKind::kGloo);
  EXPECT_TRUE(p.cuda);
  EXPECT_EQ(p.deviceIndex, 0);
  EXPECT_TRUE(p.sharedGpu);
  p = resolvePlacement(BackendKind::kGloo, DeviceKind::kAuto, kFourGpus, 6, 8);
  EXPECT_EQ(p.deviceIndex, 2);
  EXPECT_TRUE(p.sharedGpu);
  p = resolvePlacement(BackendKind::kGloo, DeviceKind::kCuda, kOneGpu, 0, 2);
  EXPECT_FALSE(p.sharedGpu);  // rank 0 is on its own index; only the extra ranks are "sharing"
}

TEST(Placement, NcclRefusesASecondRankOnOneGpu) {
  try {
    resolvePlacement(BackendKind::kAuto, DeviceKind::kAuto, kOneGpu, 1, 2);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("LOCAL_RANK 1 has no GPU of its own: only 1 visible"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("--backend gloo"), std::string::npos) << e.what();
  }
}

TEST(Placement, ImpossibleRequestsNameTheFlagAndTheReason) {
  auto message = [](BackendKind b, DeviceKind d, const DeviceFacts& f) {
    try {
      resolvePlacement(b, d, f, 0, 2);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(BackendKind::kNccl, DeviceKind::kAuto, kCpuBuild)
                .find("--backend nccl: this worker was built "
                      "without CUDA"),
            std::string::npos);
  EXPECT_NE(message(BackendKind::kNccl, DeviceKind::kAuto, kCudaBuildNoGpu).find("--backend nccl: no CUDA device"),
            std::string::npos);
  EXPECT_NE(message(BackendKind::kAuto, DeviceKind::kCuda, kCpuBuild).find("--device cuda: this worker was built"),
            std::string::npos);
  EXPECT_NE(message(BackendKind::kGloo, DeviceKind::kCuda, kCudaBuildNoGpu).find("--device cuda: no CUDA device"),
            std::string::npos);
  EXPECT_NE(message(BackendKind::kNccl, DeviceKind::kCpu, kFourGpus).find("--backend nccl needs CUDA tensors"),
            std::string::npos);
  EXPECT_NE(message(BackendKind::kShm, DeviceKind::kCuda, kFourGpus).find("--backend shm reduces CPU tensors only"),
            std::string::npos);
  // The CPU is always available, whatever the build.
  EXPECT_FALSE(resolvePlacement(BackendKind::kGloo, DeviceKind::kCpu, kFourGpus, 0, 2).cuda);
}

TEST(Placement, ShmKeepsDeviceAutoOnTheCpuEvenWithGpus) {
  const Placement p = resolvePlacement(BackendKind::kShm, DeviceKind::kAuto, kFourGpus, 1, 2);
  EXPECT_EQ(p.backend, BackendKind::kShm);
  EXPECT_FALSE(p.cuda);
  EXPECT_FALSE(p.autoBackend);
  EXPECT_TRUE(resolvePlacement(BackendKind::kShm, DeviceKind::kCpu, kCpuBuild, 0, 1).processGroup);
}

TEST(Placement, ABuildWithoutGlooRefusesGlooGroupsOnly) {
  const DeviceFacts noGloo{true, 1, false};
  EXPECT_THROW(resolvePlacement(BackendKind::kGloo, DeviceKind::kCuda, noGloo, 0, 1), ConfigError);
  EXPECT_THROW(resolvePlacement(BackendKind::kGloo, DeviceKind::kCpu, noGloo, 0, 2), ConfigError);
  EXPECT_EQ(resolvePlacement(BackendKind::kAuto, DeviceKind::kCpu, noGloo, 0, 2).backend, BackendKind::kShm)
      << "one host's CPU ranks need no Gloo";
  EXPECT_EQ(resolvePlacement(BackendKind::kAuto, DeviceKind::kAuto, noGloo, 0, 1).backend, BackendKind::kNccl);
  EXPECT_FALSE(resolvePlacement(BackendKind::kAuto, DeviceKind::kCpu, noGloo, 0, 1).processGroup)
      << "one rank on the CPU needs no group, so no Gloo";
}

TEST(Placement, ParsesFlagValues) {
  EXPECT_EQ(parseBackendKind("nccl"), BackendKind::kNccl);
  EXPECT_EQ(parseBackendKind("shm"), BackendKind::kShm);
  try {
    parseBackendKind("mpi");
  } catch (const FlagError& e) {
    EXPECT_STREQ(e.what(), "--backend: expected one of auto, gloo, nccl, shm, got 'mpi'");
  }
  EXPECT_EQ(parseDeviceKind("cuda"), DeviceKind::kCuda);
  EXPECT_EQ(parseDeviceKind("cpu"), DeviceKind::kCpu);
  EXPECT_THROW(parseBackendKind("mpi"), ConfigError);
  EXPECT_THROW(parseDeviceKind("gpu"), ConfigError);
  EXPECT_EQ(backendName(BackendKind::kGloo), "gloo");
}

}  // namespace
}  // namespace ddprun::worker
