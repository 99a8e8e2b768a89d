#include "worker/communicator.hpp"

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef DDPRUN_WITH_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#include <torch/version.h>

#ifdef DDPRUN_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "common/env.hpp"
#include "common/error.hpp"
#include "common/net_address.hpp"

namespace ddprun::worker {
namespace {

// In 1.13 the concrete process groups derive from ProcessGroup; from 2.0 on from Backend.
#if TORCH_VERSION_MAJOR >= 2
using ProcessGroupBase = c10d::Backend;
#else
using ProcessGroupBase = c10d::ProcessGroup;
#endif

class C10dPending : public PendingCollective {
 public:
  explicit C10dPending(c10::intrusive_ptr<c10d::Work> work) : work_(std::move(work)) {}
  void wait() override { work_->wait(); }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
};

class DonePending : public PendingCollective {
 public:
  void wait() override {}
};

/// World size 1: nothing to exchange.
class SingleProcess : public Communicator {
 public:
  explicit SingleProcess(torch::Device device) : device_(device) {}
  int rank() const override { return 0; }
  int worldSize() const override { return 1; }
  std::string backendName() const override { return "none"; }
  bool formsGroup() const override { return false; }
  torch::Device device() const override { return device_; }
  std::unique_ptr<PendingCollective> allreduceSumAsync(torch::Tensor&) override {
    return std::make_unique<DonePending>();
  }
  void broadcast(torch::Tensor&, int) override {}
  void barrier() override {}

 private:
  torch::Device device_;
};

class C10dCommunicator : public Communicator {
 public:
  C10dCommunicator(c10::intrusive_ptr<ProcessGroupBase> pg, std::string name, torch::Device device)
      : pg_(std::move(pg)), name_(std::move(name)), device_(device) {}
  int rank() const override { return pg_->getRank(); }
  int worldSize() const override { return pg_->getSize(); }
  std::string backendName() const override { return name_; }
  bool formsGroup() const override { return true; }
  torch::Device device() const override { return device_; }

  std::unique_ptr<PendingCollective> allreduceSumAsync(torch::Tensor& tensor) override {
    std::vector<at::Tensor> tensors{tensor};
    c10d::AllreduceOptions options;
    options.reduceOp = c10d::ReduceOp::SUM;
    return std::make_unique<C10dPending>(pg_->allreduce(tensors, options));
  }
  void broadcast(torch::Tensor& tensor, int root) override {
    std::vector<at::Tensor> tensors{tensor};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    pg_->broadcast(tensors, options)->wait();
  }
  void barrier() override {
    c10d::BarrierOptions options;
    // NCCL's barrier is an allreduce on some GPU; name ours, or it may guess another rank's device.
    if (device_.is_cuda()) options.device_ids = {device_.index()};
    pg_->barrier(options)->wait();
  }

 private:
  c10::intrusive_ptr<ProcessGroupBase> pg_;
  std::string name_;
  torch::Device device_;
};

c10::intrusive_ptr<c10d::Store> connectStore(const DistEnv& env, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;  // assigned by name: 2.x appends fields
  options.port = static_cast<uint16_t>(env.masterPort);
  options.isServer = !env.useAgentStore && env.rank == 0;
  options.numWorkers = static_cast<size_t>(env.worldSize);
  options.waitWorkers = false;
  options.timeout = timeout;
  options.multiTenant = true;
  c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::TCPStore>(env.masterAddr, options);
  if (env.useAgentStore) {
    // torch/distributed/rendezvous.py: every attempt gets its own key space in the agent's store.
    store = c10::make_intrusive<c10d::PrefixStore>("/worker/attempt_" + std::to_string(env.restartCount), store);
  }
  return c10::make_intrusive<c10d::PrefixStore>("default_pg", store);
}

c10::intrusive_ptr<ProcessGroupBase> makeGloo([[maybe_unused]] const DistEnv& env,
                                              [[maybe_unused]] const c10::intrusive_ptr<c10d::Store>& store,
                                              [[maybe_unused]] std::chrono::milliseconds timeout) {
#ifndef DDPRUN_WITH_GLOO
  throw ConfigError("--backend gloo: this worker was built without Gloo");
#else
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  // The C++ factories ignore GLOO_SOCKET_IFNAME (the Python binding reads it), so honour it here.
  if (auto iface = getEnv("GLOO_SOCKET_IFNAME")) {
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(*iface));
  } else if (isLoopbackHost(env.masterAddr)) {
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  } else {
    options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  }
  options->threads = 2;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, env.rank, env.worldSize, options);
#endif
}

c10::intrusive_ptr<ProcessGroupBase> makeNccl([[maybe_unused]] const DistEnv& env,
                                              [[maybe_unused]] const c10::intrusive_ptr<c10d::Store>& store,
                                              [[maybe_unused]] std::chrono::milliseconds timeout) {
#ifdef DDPRUN_WITH_CUDA
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;  // a Backend::Options member in 2.x, ProcessGroup::Options in 1.13
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, env.rank, env.worldSize, options);
#else
  throw ConfigError("--backend nccl: this worker was built without CUDA/NCCL");
#endif
}

std::unique_ptr<Communicator> makeProcessGroup(const DistEnv& env, const Placement& placement,
                                               std::chrono::milliseconds timeout) {
  auto store = connectStore(env, timeout);
  const torch::Device device = torchDevice(placement);
  if (placement.backend == BackendKind::kNccl) {
    return std::make_unique<C10dCommunicator>(makeNccl(env, store, timeout), "nccl", device);
  }
  return std::make_unique<C10dCommunicator>(makeGloo(env, store, timeout), "gloo", device);
}

}  // namespace

DeviceFacts probeDevices() {
  DeviceFacts facts;
#ifndef DDPRUN_WITH_GLOO
  facts.glooBuilt = false;
#endif
#ifdef DDPRUN_WITH_CUDA
  facts.cudaBuilt = true;
  facts.gpuCount = static_cast<int>(torch::cuda::device_count());
#endif
  return facts;
}

Placement placeRank(const DistEnv& env, BackendKind backend, DeviceKind device) {
  return resolvePlacement(backend, device, probeDevices(), env.localRank, env.worldSize);
}

void activateDevice([[maybe_unused]] const Placement& placement) {
#ifdef DDPRUN_WITH_CUDA
  if (placement.cuda) c10::cuda::set_device(static_cast<c10::DeviceIndex>(placement.deviceIndex));
#endif
}

torch::Device torchDevice(const Placement& placement) {
  if (!placement.cuda) return torch::kCPU;
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(placement.deviceIndex));
}

std::unique_ptr<Communicator> makeCommunicator(const DistEnv& env, const Placement& placement,
                                               std::chrono::milliseconds timeout) {
  if (!placement.processGroup) return std::make_unique<SingleProcess>(torchDevice(placement));
  try {
    return makeProcessGroup(env, placement, timeout);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    // c10d's own messages ("Socket Timeout") do not say what was being waited for.
    throw Error("could not form the process group of " + std::to_string(env.worldSize) + " ranks through the store at " +
                env.masterAddr + ":" + std::to_string(env.masterPort) + " within " +
                std::to_string(timeout.count() / 1000) + " s (a rank missing or dead?): " + firstLine(e.what()));
  }
}

}  // namespace ddprun::worker
