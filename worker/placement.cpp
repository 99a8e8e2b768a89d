#include "worker/placement.hpp"

#include "common/error.hpp"

namespace ddprun::worker {

BackendKind parseBackendKind(const std::string& name) {
  if (name == "auto") return BackendKind::kAuto;
  if (name == "gloo") return BackendKind::kGloo;
  if (name == "nccl") return BackendKind::kNccl;
  throw ConfigError("--backend: expected auto, gloo or nccl, got '" + name + "'");
}

DeviceKind parseDeviceKind(const std::string& name) {
  if (name == "auto") return DeviceKind::kAuto;
  if (name == "cpu") return DeviceKind::kCpu;
  if (name == "cuda") return DeviceKind::kCuda;
  throw ConfigError("--device: expected auto, cpu or cuda, got '" + name + "'");
}

std::string backendName(BackendKind backend) {
  switch (backend) {
    case BackendKind::kGloo: return "gloo";
    case BackendKind::kNccl: return "nccl";
    case BackendKind::kAuto: break;
  }
  return "auto";
}

std::string Placement::deviceName() const { return cuda ? "cuda:" + std::to_string(deviceIndex) : "cpu"; }

namespace {

/// Why CUDA cannot be used here, or "" when it can.
std::string cudaUnavailableReason(const DeviceFacts& facts) {
  if (!facts.cudaBuilt) {
    return "this worker was built without CUDA (configure with -DDDPRUN_WITH_CUDA=ON against a CUDA-enabled "
           "LibTorch)";
  }
  if (facts.gpuCount <= 0) return "no CUDA device is visible (driver, CUDA_VISIBLE_DEVICES)";
  return "";
}

bool useCuda(BackendKind backend, DeviceKind device, const DeviceFacts& facts) {
  const std::string reason = cudaUnavailableReason(facts);
  switch (device) {
    case DeviceKind::kCpu:
      if (backend == BackendKind::kNccl) throw ConfigError("--backend nccl needs CUDA tensors, not --device cpu");
      return false;
    case DeviceKind::kCuda:
      if (!reason.empty()) throw ConfigError("--device cuda: " + reason);
      return true;
    case DeviceKind::kAuto:
      if (backend == BackendKind::kNccl && !reason.empty()) throw ConfigError("--backend nccl: " + reason);
      return reason.empty();
  }
  return false;
}

}  // namespace

Placement resolvePlacement(BackendKind backend, DeviceKind device, const DeviceFacts& facts, int localRank,
                           int worldSize) {
  Placement placement;
  placement.cuda = useCuda(backend, device, facts);
  placement.backend = backend != BackendKind::kAuto ? backend
                      : placement.cuda            ? BackendKind::kNccl
                                                  : BackendKind::kGloo;
  placement.processGroup = worldSize > 1 || backend != BackendKind::kAuto;
  if (placement.processGroup && placement.backend == BackendKind::kGloo && !facts.glooBuilt) {
    throw ConfigError("--backend gloo: this worker was built without Gloo (its LibTorch ships no Gloo headers); "
                      "use --backend nccl on CUDA");
  }
  if (!placement.cuda) return placement;
  if (localRank < facts.gpuCount) {
    placement.deviceIndex = localRank;
    return placement;
  }
  if (placement.backend == BackendKind::kNccl) {
    throw ConfigError("LOCAL_RANK " + std::to_string(localRank) + " has no GPU of its own: only " +
                      std::to_string(facts.gpuCount) + " visible, and NCCL cannot run two ranks on one GPU "
                      "(start fewer workers, e.g. ddprun --nproc-per-node gpu, or share GPUs with --backend gloo)");
  }
  placement.deviceIndex = localRank % facts.gpuCount;
  placement.sharedGpu = true;
  return placement;
}

}  // namespace ddprun::worker
