#pragma once
// The seam between training and the backends: the collectives the worker uses, and what each may cost the
// calling thread. Implementations sit beside this file, one per backend (c10d_communicator for Gloo and
// NCCL, shm_communicator for shared memory); make_communicator.hpp picks one from the backend table.
//
// Threading contract (GradientReducer calls allreduceSumAsync from autograd hooks, on the thread that runs
// backward, while that thread still has gradients to compute):
// - allreduceSumAsync must not block on peers. It may do work proportional to this rank's own share of
//   the tensor (a copy into a staging buffer, say), but never wait for another rank to arrive. Waiting
//   happens in PendingCollective::wait(). c10d's Gloo and NCCL queue the work on their own threads (NCCL:
//   on a CUDA stream); the shm backend hands it to one helper thread per communicator.
// - Collectives run in the order they were started, on every rank alike; the caller guarantees the order.
// - Calls come from one thread at a time (the reducer serialises its hooks with a mutex); broadcast,
//   barrier and allreduceSum block until done.
// - The tensor passed to allreduceSumAsync must stay alive and untouched until wait() returns.
// - A failed collective (a peer dead, hung past the timeout, a broken connection) throws from wait() or from
//   the blocking calls, with a message naming the backend and, where known, the missing rank. The group is
//   then unusable: later calls throw too.
#include <torch/torch.h>

#include <memory>
#include <string>

namespace ddprun::worker {

/// A pending asynchronous collective.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  /// Blocks until the collective is done; throws when it failed (see the threading contract above).
  virtual void wait() = 0;
};

/// Collectives over the worker group. Without a process group (world size 1 and no explicit --backend)
/// every call is a no-op and no store is contacted, so a single process needs no MASTER_ADDR.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int worldSize() const = 0;
  /// "gloo", "nccl", "shm", "shm+gloo" (several hosts) or "none" (no process group).
  virtual std::string backendName() const = 0;
  /// True when collectives really run (a process group, also of one rank); false for "none".
  virtual bool formsGroup() const = 0;
  /// The device tensors must live on for this backend (CPU for Gloo and shm, cuda:LOCAL_RANK for NCCL).
  virtual torch::Device device() const = 0;

  /// Starts an in-place SUM allreduce of `tensor` (contiguous); all ranks must call in the same order.
  /// Does not block on peers (see the threading contract).
  virtual std::unique_ptr<PendingCollective> allreduceSumAsync(torch::Tensor& tensor) = 0;
  /// In-place broadcast of `tensor` (contiguous) from `root`; blocks until done.
  virtual void broadcast(torch::Tensor& tensor, int root) = 0;
  /// Returns once every rank has entered the barrier.
  virtual void barrier() = 0;

  /// Leaves the group after a failure (rank replacement): peers waiting for this rank fail at once instead of at
  /// the timeout. The group is unusable afterwards. Backends whose peers learn it when the group is destroyed
  /// (Gloo, NCCL: their connections close) do nothing here.
  virtual void abandon(const std::string& reason) { (void)reason; }

  /// Blocking SUM allreduce.
  void allreduceSum(torch::Tensor& tensor) { allreduceSumAsync(tensor)->wait(); }
};

/// A collective that is already complete (a one-process "group", or a failure reported at start).
class DonePending : public PendingCollective {
 public:
  void wait() override {}
};

}  // namespace ddprun::worker
