#include "worker/comm/tensor_broadcast.hpp"

#include <algorithm>

namespace ddprun::worker {

void broadcastTensors(std::vector<torch::Tensor>& tensors, Communicator& comm, int root) {
  torch::NoGradGuard noGrad;
  std::vector<c10::ScalarType> dtypes;
  for (const auto& t : tensors) {
    if (std::find(dtypes.begin(), dtypes.end(), t.scalar_type()) == dtypes.end()) dtypes.push_back(t.scalar_type());
  }
  for (const auto dtype : dtypes) {
    std::vector<torch::Tensor> parts;
    for (const auto& t : tensors) {
      if (t.scalar_type() == dtype) parts.push_back(t.detach().reshape(-1));
    }
    torch::Tensor flat = torch::cat(parts).to(comm.device());
    comm.broadcast(flat, root);
    int64_t offset = 0;
    for (auto& t : tensors) {
      if (t.scalar_type() != dtype) continue;
      t.detach().view(-1).copy_(flat.narrow(0, offset, t.numel()));
      offset += t.numel();
    }
  }
}

}  // namespace ddprun::worker
