#pragma once
// The shm backend as a Communicator: the collectives of a ShmGroup among the ranks of one host, run on one
// helper thread per communicator (so allreduceSumAsync returns at once, as the threading contract in
// communicator.hpp requires), and, when the job spans several hosts, a hierarchical form: shm inside each
// host, Gloo between one leader per host (the host's lowest rank), shm broadcast back.
#include <memory>
#include <string>
#include <vector>

#include "worker/comm/collective_queue.hpp"
#include "worker/comm/communicator.hpp"
#include "worker/comm/shm_group.hpp"

namespace ddprun::worker {

/// Which ranks share a host. Nodes are ordered by their lowest rank, and so are the ranks of a node; a
/// node's first rank is its leader.
struct Topology {
  std::vector<std::vector<int>> nodes;  ///< global ranks per node
  std::vector<int> nodeOf;              ///< node index per global rank

  /// The topology of ranks 0..n-1 whose node is named keyOfRank[rank] (equal keys: same node).
  static Topology fromNodeKeys(const std::vector<std::string>& keyOfRank);
  /// Index of `rank` within its node.
  int localIndex(int rank) const;
  /// True when every node holds exactly one rank (shared memory has nothing to share).
  bool oneRankPerNode() const;
};

class ShmCommunicator : public Communicator {
 public:
  /// Global rank `rank` of `topology`, using `local` for its node's ranks and, on a node leader of a job
  /// with several nodes, `leaders` (a group of the node leaders, node index = its rank) between nodes.
  ShmCommunicator(int rank, Topology topology, std::unique_ptr<ShmGroup> local, std::unique_ptr<Communicator> leaders);
  /// Cancels a collective still waiting for a peer, then stops the helper thread.
  ~ShmCommunicator() override;

  int rank() const override { return rank_; }
  int worldSize() const override { return static_cast<int>(topology_.nodeOf.size()); }
  std::string backendName() const override { return topology_.nodes.size() > 1 ? "shm+gloo" : "shm"; }
  bool formsGroup() const override { return true; }
  torch::Device device() const override { return torch::kCPU; }

  /// Queues the sum on the helper thread and returns. Throws Error at once for a tensor that is not a
  /// contiguous CPU tensor of float32, float64, bfloat16, int32 or int64.
  std::unique_ptr<PendingCollective> allreduceSumAsync(torch::Tensor& tensor) override;
  void broadcast(torch::Tensor& tensor, int root) override;
  void barrier() override;
  /// Marks this node's shm group broken (its other ranks' waits fail at once); the leaders' Gloo group tells the
  /// other nodes when it is destroyed.
  void abandon(const std::string& reason) override { local_->abort(reason); }

 private:
  void allreduceNow(torch::Tensor tensor, ShmDtype dtype);
  void broadcastNow(torch::Tensor tensor, int root);
  void barrierNow();
  bool hierarchical() const { return topology_.nodes.size() > 1; }

  int rank_;
  Topology topology_;
  int node_;                               ///< this rank's node index
  std::unique_ptr<ShmGroup> local_;        ///< this node's ranks
  std::unique_ptr<Communicator> leaders_;  ///< node leaders' group; null on other ranks and on one node
  CollectiveQueue queue_;                  ///< declared last: its thread stops first
};

}  // namespace ddprun::worker
