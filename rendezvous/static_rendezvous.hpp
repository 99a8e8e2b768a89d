#pragma once
// Static multi-node rendezvous (--nnodes N --node-rank R --master-addr A --master-port P), as PyTorch's
// StaticTCPRendezvous (torch/distributed/elastic/rendezvous/static_tcp_rendezvous.py): membership is fixed,
// node rank 0's agent serves the store at A:P, and the workers of every node use it. Each round the nodes
// exchange their local world sizes through the store so global ranks stay contiguous even when nodes run
// different --nproc-per-node (what torch's agent does in _assign_worker_ranks).
#include <chrono>
#include <memory>
#include <string>

#include "rendezvous/rendezvous_handler.hpp"
#include "store/prefix_store.hpp"

namespace ddprun::rendezvous {

struct StaticRendezvousSettings {
  std::string runId;
  int nnodes = 1;
  int nodeRank = 0;
  std::string masterAddr;
  int masterPort = 0;
  std::chrono::milliseconds joinTimeout{600000};
  std::chrono::milliseconds closeTimeout{30000};
};

class StaticRendezvous : public RendezvousHandler {
 public:
  /// Keys live under "/ddprun.static.<runId>/" in `store`; store errors surface as RendezvousBackendError.
  StaticRendezvous(std::shared_ptr<store::Store> store, StaticRendezvousSettings settings);

  RoundAssignment next(const NodeDescriptor& self, const CancelFlag& cancel) override;
  Membership check() override { return Membership::kStable; }
  void keepAlive() noexcept override {}
  void finish(NodeOutcome outcome, const CancelFlag& cancel) override;
  std::string describe() const override;

 private:
  /// Waits for every key, in slices so that `cancel` is seen; false when `deadline` passed first.
  bool waitAll(const std::vector<std::string>& keys, std::chrono::steady_clock::time_point deadline,
               const CancelFlag& cancel);
  void claimNodeRank(const NodeDescriptor& self);

  store::PrefixStore store_;
  StaticRendezvousSettings settings_;
  int64_t round_ = -1;
};

}  // namespace ddprun::rendezvous
