#include "worker/comm/make_communicator.hpp"

#include "common/error.hpp"
#include "worker/comm/c10d_communicator.hpp"
#include "worker/comm/devices.hpp"
#include "worker/comm/shm_bootstrap.hpp"
#include "worker/comm/store_bootstrap.hpp"

namespace ddprun::worker {
namespace {

/// World size 1 without a named backend: nothing to exchange.
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

using Factory = std::unique_ptr<Communicator> (*)(const DistEnv&, const Placement&, std::chrono::milliseconds);

C10dGroupSpec wholeGroup(const DistEnv& env, const Placement& placement, std::chrono::milliseconds timeout) {
  return {connectStore(env, timeout), env.rank, env.worldSize, env.masterAddr, timeout, torchDevice(placement)};
}

std::unique_ptr<Communicator> makeGloo(const DistEnv& env, const Placement& placement,
                                       std::chrono::milliseconds timeout) {
  return makeGlooCommunicator(wholeGroup(env, placement, timeout));
}

std::unique_ptr<Communicator> makeNccl(const DistEnv& env, const Placement& placement,
                                       std::chrono::milliseconds timeout) {
  return makeNcclCommunicator(wholeGroup(env, placement, timeout));
}

/// The factory of each concrete backend (BackendKind::kAuto never reaches here: placement resolves it).
Factory factoryFor(BackendKind kind) {
  static const std::pair<BackendKind, Factory> kFactories[] = {
      {BackendKind::kGloo, &makeGloo},
      {BackendKind::kNccl, &makeNccl},
      {BackendKind::kShm, &makeShmCommunicator},
  };
  for (const auto& [k, factory] : kFactories) {
    if (k == kind) return factory;
  }
  throw ConfigError("--backend " + backendName(kind) + ": no communicator for it in this worker");
}

}  // namespace

std::unique_ptr<Communicator> makeCommunicator(const DistEnv& env, const Placement& placement,
                                               std::chrono::milliseconds timeout) {
  if (!placement.processGroup) return std::make_unique<SingleProcess>(torchDevice(placement));
  const Factory factory = factoryFor(placement.backend);
  try {
    return factory(env, placement, timeout);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(groupFormationError(env, timeout, e.what()));
  }
}

}  // namespace ddprun::worker
