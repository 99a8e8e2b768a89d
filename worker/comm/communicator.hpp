#pragma once
// The one place that talks to c10d: store creation (torchrun's env:// rules), the process group
// (Gloo on CPU, NCCL on GPU when built with DDPRUN_WITH_CUDA), and the few collectives the worker uses.
// Any difference between LibTorch 1.13 and 2.x c10d APIs stays in communicator.cpp.
#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <string>

#include "worker/dist_env.hpp"
#include "worker/placement.hpp"

namespace ddprun::worker {

/// A pending asynchronous collective.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  /// Blocks until the collective is done; throws (c10::Error, gloo::IoException) when a peer failed.
  virtual void wait() = 0;
};

/// Collectives over the worker group. Without a process group (world size 1 and no explicit --backend)
/// every call is a no-op and no store is contacted, so a single process needs no MASTER_ADDR.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int worldSize() const = 0;
  /// "gloo", "nccl" or "none" (no process group).
  virtual std::string backendName() const = 0;
  /// True when collectives really run (a c10d process group, also of one rank); false for "none".
  virtual bool formsGroup() const = 0;
  /// The device tensors must live on for this backend (CPU for Gloo, cuda:LOCAL_RANK for NCCL).
  virtual torch::Device device() const = 0;

  /// Starts an in-place SUM allreduce of `tensor` (contiguous); all ranks must call in the same order.
  virtual std::unique_ptr<PendingCollective> allreduceSumAsync(torch::Tensor& tensor) = 0;
  /// In-place broadcast of `tensor` (contiguous) from `root`.
  virtual void broadcast(torch::Tensor& tensor, int root) = 0;
  virtual void barrier() = 0;

  /// Blocking SUM allreduce.
  void allreduceSum(torch::Tensor& tensor) { allreduceSumAsync(tensor)->wait(); }
};

/// What this build and machine offer: whether the worker was compiled with CUDA, and how many CUDA
/// devices LibTorch sees (0 in a CPU build; the CUDA runtime honours CUDA_VISIBLE_DEVICES).
DeviceFacts probeDevices();

/// Resolves --backend/--device for this rank (see resolvePlacement) from probeDevices(), LOCAL_RANK and
/// WORLD_SIZE. Throws ConfigError when the request cannot be met here.
Placement placeRank(const DistEnv& env, BackendKind backend, DeviceKind device);

/// Makes `placement`'s GPU the current CUDA device of this process (so NCCL, the caching allocator and
/// every kernel use it); nothing on the CPU.
void activateDevice(const Placement& placement);

/// The torch::Device for `placement`: torch::kCPU or cuda:deviceIndex.
torch::Device torchDevice(const Placement& placement);

/// Connects to the store and builds the process group as torch.distributed's env:// would:
/// with TORCHELASTIC_USE_AGENT_STORE=True every rank is a client of MASTER_ADDR:MASTER_PORT under the
/// prefix "/worker/attempt_<restart count>" (torch/distributed/rendezvous.py); otherwise rank 0 hosts
/// the TCPStore there. `timeout` bounds store operations and collectives. Without
/// `placement.processGroup` nothing is contacted. Throws ddprun::Error (with the store address) when
/// peers do not come; NCCL's own errors surface from the first collective.
std::unique_ptr<Communicator> makeCommunicator(const DistEnv& env, const Placement& placement,
                                               std::chrono::milliseconds timeout);

}  // namespace ddprun::worker
