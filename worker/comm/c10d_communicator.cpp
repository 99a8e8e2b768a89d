#include "worker/comm/c10d_communicator.hpp"

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#ifdef DDPRUN_WITH_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#include <torch/version.h>

#ifdef DDPRUN_WITH_CUDA
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

}  // namespace

std::unique_ptr<Communicator> makeGlooCommunicator([[maybe_unused]] const C10dGroupSpec& spec) {
#ifndef DDPRUN_WITH_GLOO
  throw ConfigError("--backend gloo: this worker was built without Gloo");
#else
  auto options = c10d::ProcessGroupGloo::Options::create(spec.timeout);
  // The C++ factories ignore GLOO_SOCKET_IFNAME (the Python binding reads it), so honour it here.
  if (auto iface = getEnv("GLOO_SOCKET_IFNAME")) {
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(*iface));
  } else if (isLoopbackHost(spec.masterAddr)) {
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  } else {
    options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  }
  options->threads = 2;
  auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(spec.store, spec.rank, spec.size, options);
  return std::make_unique<C10dCommunicator>(std::move(pg), "gloo", spec.device);
#endif
}

std::unique_ptr<Communicator> makeNcclCommunicator([[maybe_unused]] const C10dGroupSpec& spec) {
#ifdef DDPRUN_WITH_CUDA
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = spec.timeout;  // a Backend::Options member in 2.x, ProcessGroup::Options in 1.13
  auto pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(spec.store, spec.rank, spec.size, options);
  return std::make_unique<C10dCommunicator>(std::move(pg), "nccl", spec.device);
#else
  throw ConfigError("--backend nccl: this worker was built without CUDA/NCCL");
#endif
}

}  // namespace ddprun::worker
