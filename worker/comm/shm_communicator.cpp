#include "worker/comm/shm_communicator.hpp"

#include <algorithm>
#include <map>

namespace ddprun::worker {
namespace {

ShmDtype shmDtypeOf(const torch::Tensor& tensor) {
  switch (tensor.scalar_type()) {
    case torch::kFloat: return ShmDtype::kFloat32;
    case torch::kDouble: return ShmDtype::kFloat64;
    case torch::kBFloat16: return ShmDtype::kBFloat16;
    case torch::kInt: return ShmDtype::kInt32;
    case torch::kLong: return ShmDtype::kInt64;
    default: break;
  }
  throw Error(std::string("backend shm: cannot sum tensors of dtype ") + c10::toString(tensor.scalar_type()) +
              " (float32, float64, bfloat16, int32 and int64 only)");
}

void checkTensor(const torch::Tensor& tensor) {
  if (!tensor.device().is_cpu() || !tensor.is_contiguous()) {
    throw Error("backend shm: collectives need contiguous CPU tensors, got one on " + tensor.device().str());
  }
}

/// A collective queued on the helper thread.
class QueuedPending : public PendingCollective {
 public:
  QueuedPending(CollectiveQueue& queue, CollectiveQueue::Ticket ticket) : queue_(queue), ticket_(std::move(ticket)) {}
  void wait() override { queue_.wait(ticket_); }

 private:
  CollectiveQueue& queue_;
  CollectiveQueue::Ticket ticket_;
};

}  // namespace

Topology Topology::fromNodeKeys(const std::vector<std::string>& keyOfRank) {
  Topology topology;
  std::map<std::string, int> nodeOfKey;
  for (int rank = 0; rank < static_cast<int>(keyOfRank.size()); ++rank) {
    auto [it, added] = nodeOfKey.emplace(keyOfRank[static_cast<size_t>(rank)], static_cast<int>(topology.nodes.size()));
    if (added) topology.nodes.emplace_back();
    topology.nodes[static_cast<size_t>(it->second)].push_back(rank);
    topology.nodeOf.push_back(it->second);
  }
  return topology;  // ranks ascend, so nodes are numbered by their lowest rank
}

int Topology::localIndex(int rank) const {
  const auto& ranks = nodes[static_cast<size_t>(nodeOf[static_cast<size_t>(rank)])];
  return static_cast<int>(std::find(ranks.begin(), ranks.end(), rank) - ranks.begin());
}

bool Topology::oneRankPerNode() const { return nodes.size() == nodeOf.size(); }

ShmCommunicator::ShmCommunicator(int rank, Topology topology, std::unique_ptr<ShmGroup> local,
                                 std::unique_ptr<Communicator> leaders)
    : rank_(rank),
      topology_(std::move(topology)),
      node_(topology_.nodeOf[static_cast<size_t>(rank)]),
      local_(std::move(local)),
      leaders_(std::move(leaders)) {}

ShmCommunicator::~ShmCommunicator() { local_->cancel(); }

std::unique_ptr<PendingCollective> ShmCommunicator::allreduceSumAsync(torch::Tensor& tensor) {
  checkTensor(tensor);
  const ShmDtype dtype = shmDtypeOf(tensor);
  return std::make_unique<QueuedPending>(queue_, queue_.submit([this, tensor, dtype] { allreduceNow(tensor, dtype); }));
}

void ShmCommunicator::broadcast(torch::Tensor& tensor, int root) {
  checkTensor(tensor);
  queue_.run([this, tensor, root] { broadcastNow(tensor, root); });
}

void ShmCommunicator::barrier() {
  queue_.run([this] { barrierNow(); });
}

void ShmCommunicator::allreduceNow(torch::Tensor tensor, ShmDtype dtype) {
  local_->allreduceSum(tensor.data_ptr(), static_cast<size_t>(tensor.numel()), dtype);
  if (!hierarchical()) return;
  if (leaders_) leaders_->allreduceSum(tensor);
  local_->broadcast(tensor.data_ptr(), tensor.nbytes(), 0);
}

void ShmCommunicator::broadcastNow(torch::Tensor tensor, int root) {
  const int rootNode = topology_.nodeOf[static_cast<size_t>(root)];
  if (node_ == rootNode) local_->broadcast(tensor.data_ptr(), tensor.nbytes(), topology_.localIndex(root));
  if (!hierarchical()) return;
  if (leaders_) leaders_->broadcast(tensor, rootNode);
  if (node_ != rootNode) local_->broadcast(tensor.data_ptr(), tensor.nbytes(), 0);
}

void ShmCommunicator::barrierNow() {
  local_->barrier();
  if (!hierarchical()) return;
  if (leaders_) leaders_->barrier();
  local_->barrier();
}

}  // namespace ddprun::worker
