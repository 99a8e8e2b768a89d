#pragma once
// The one place that talks to c10d: store creation (torchrun's env:// rules), the process group
// (Gloo on CPU, NCCL on GPU when built with DDPRUN_WITH_CUDA), and the few collectives the worker uses.
// Any difference between LibTorch 1.13 and 2.x c10d APIs stays in communicator.cpp.
#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <string>

#include "worker/dist_env.hpp"

namespace ddprun::worker {

/// --backend values.
enum class BackendKind { kAuto, kGloo, kNccl };

/// Parses "auto", "gloo" or "nccl"; throws ConfigError otherwise.
BackendKind parseBackendKind(const std::string& name);

/// A pending asynchronous collective.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  /// Blocks until the collective is done; throws (c10::Error, gloo::IoException) when a peer failed.
  virtual void wait() = 0;
};

/// Collectives over the worker group. With world size 1 every call is a no-op and no store or
/// process group is created, so a single process needs no MASTER_ADDR.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int worldSize() const = 0;
  /// "gloo", "nccl" or "none" (world size 1).
  virtual std::string backendName() const = 0;
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

/// Throws ConfigError when `backend` cannot work in this build or on this machine (nccl without CUDA).
void checkBackendAvailable(BackendKind backend);

/// Connects to the store and builds the process group as torch.distributed's env:// would:
/// with TORCHELASTIC_USE_AGENT_STORE=True every rank is a client of MASTER_ADDR:MASTER_PORT under the
/// prefix "/worker/attempt_<restart count>" (torch/distributed/rendezvous.py); otherwise rank 0 hosts
/// the TCPStore there. `timeout` bounds store operations and collectives. Throws ConfigError when the
/// backend is unavailable in this build, and c10d errors (with the address) when peers do not come.
std::unique_ptr<Communicator> makeCommunicator(const DistEnv& env, BackendKind backend,
                                               std::chrono::milliseconds timeout);

}  // namespace ddprun::worker
