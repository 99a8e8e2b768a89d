#include "worker/comm/placement.hpp"

#include "worker/errors.hpp"

namespace ddprun::worker {

DeviceKind parseDeviceKind(const std::string& name) {
  if (name == "auto") return DeviceKind::kAuto;
  if (name == "cpu") return DeviceKind::kCpu;
  if (name == "cuda") return DeviceKind::kCuda;
  throw FlagError("--device: expected auto, cpu or cuda, got '" + name + "'");
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
  const BackendInfo& info = backendInfo(backend);
  const std::string reason = cudaUnavailableReason(facts);
  switch (device) {
    case DeviceKind::kCpu:
      if (!info.cpuTensors)
        throw FlagError("--backend " + std::string(info.name) + " needs CUDA tensors, not --device cpu");
      return false;
    case DeviceKind::kCuda:
      if (!reason.empty()) throw FlagError("--device cuda: " + reason);
      if (!info.cudaTensors) {
        throw FlagError("--backend " + std::string(info.name) +
                        " reduces CPU tensors only: use --device cpu, or "
                        "--backend nccl or gloo with --device cuda");
      }
      return true;
    case DeviceKind::kAuto:
      if (!info.cudaTensors) return false;
      if (!info.cpuTensors && !reason.empty()) throw FlagError("--backend " + std::string(info.name) + ": " + reason);
      return reason.empty();
  }
  return false;
}

}  // namespace

Placement resolvePlacement(BackendKind backend, DeviceKind device, const DeviceFacts& facts, int localRank,
                           int worldSize) {
  Placement placement;
  placement.cuda = useCuda(backend, device, facts);
  placement.autoBackend = backend == BackendKind::kAuto;
  if (placement.autoBackend) backend = placement.cuda ? BackendKind::kNccl : BackendKind::kShm;
  placement.backend = backend;
  placement.processGroup = worldSize > 1 || !placement.autoBackend;
  const BackendInfo& info = backendInfo(backend);
  if (placement.processGroup && info.needsGlooBuild && !facts.glooBuilt) {
    throw FlagError("--backend " + std::string(info.name) +
                    ": this worker was built without Gloo (its LibTorch ships "
                    "no Gloo headers); use --backend nccl on CUDA or shm on the CPU");
  }
  if (!placement.cuda) return placement;
  if (localRank < facts.gpuCount) {
    placement.deviceIndex = localRank;
    return placement;
  }
  if (!info.sharesGpu) {
    throw FlagError("LOCAL_RANK " + std::to_string(localRank) + " has no GPU of its own: only " +
                    std::to_string(facts.gpuCount) + " visible, and " + info.name +
                    " cannot run two ranks on one "
                    "GPU (start fewer workers, e.g. ddprun --nproc-per-node gpu, or share GPUs with --backend gloo)");
  }
  placement.deviceIndex = localRank % facts.gpuCount;
  placement.sharedGpu = true;
  return placement;
}

}  // namespace ddprun::worker
