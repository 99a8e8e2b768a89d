#pragma once
// The communicator over a c10d process group: Gloo (CPU, or CUDA tensors through host copies) and NCCL
// (CUDA, built with DDPRUN_WITH_CUDA). The one place that includes c10d's process groups: any difference
// between LibTorch 1.13 and 2.x c10d APIs stays in c10d_communicator.cpp.
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <string>

#include "worker/comm/communicator.hpp"

namespace ddprun::worker {

/// Where a c10d group forms: its store, this rank's place in it, and the address its peers meet at.
struct C10dGroupSpec {
  c10::intrusive_ptr<c10d::Store> store;      ///< the group's key space (see store_bootstrap.hpp)
  int rank = 0;                               ///< rank within this group
  int size = 1;                               ///< ranks in this group
  std::string masterAddr;                     ///< MASTER_ADDR: a loopback address keeps Gloo on loopback
  std::chrono::milliseconds timeout{300000};  ///< bounds connection and every collective
  torch::Device device = torch::kCPU;         ///< where the group's tensors live
};

/// A Gloo process group over `spec`. GLOO_SOCKET_IFNAME picks the interface, as in Python. Blocks until
/// every rank of the group has connected; throws c10::Error on timeout, ConfigError in a build without Gloo.
std::unique_ptr<Communicator> makeGlooCommunicator(const C10dGroupSpec& spec);

/// An NCCL process group over `spec` (its communicator forms lazily, at the first collective). Throws
/// ConfigError in a build without CUDA.
std::unique_ptr<Communicator> makeNcclCommunicator(const C10dGroupSpec& spec);

}  // namespace ddprun::worker
