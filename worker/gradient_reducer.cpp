#include "worker/gradient_reducer.hpp"

#include "common/error.hpp"
#include "worker/comm/tensor_broadcast.hpp"

namespace ddprun::worker {

std::vector<std::vector<size_t>> assignBuckets(const std::vector<int64_t>& sizesBytes, int64_t bucketCapBytes) {
  std::vector<std::vector<size_t>> buckets;
  std::vector<size_t> current;
  int64_t currentBytes = 0;
  for (size_t i = sizesBytes.size(); i-- > 0;) {
    current.push_back(i);
    currentBytes += sizesBytes[i];
    if (currentBytes >= bucketCapBytes) {
      buckets.push_back(std::move(current));
      current.clear();
      currentBytes = 0;
    }
  }
  if (!current.empty()) buckets.push_back(std::move(current));
  return buckets;
}

GradientReducer::GradientReducer(std::vector<torch::Tensor> params, Communicator& comm, int64_t bucketCapBytes,
                                 bool overlap)
    : params_(std::move(params)), comm_(comm), overlap_(overlap) {
  std::vector<int64_t> sizes;
  for (const auto& p : params_) sizes.push_back(p.numel() * static_cast<int64_t>(p.element_size()));
  location_.resize(params_.size());
  gradSeen_.assign(params_.size(), false);
  for (auto& indices : assignBuckets(sizes, bucketCapBytes)) {
    Bucket bucket;
    bucket.params = indices;
    int64_t offset = 0;
    for (size_t slot = 0; slot < indices.size(); ++slot) {
      bucket.offsets.push_back(offset);
      offset += params_[indices[slot]].numel();
      location_[indices[slot]] = {buckets_.size(), slot};
    }
    bucket.flat = torch::zeros({offset}, params_[indices[0]].options().requires_grad(false));
    buckets_.push_back(std::move(bucket));
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    // Copy the gradient into its bucket as it is produced; returning nothing leaves it unchanged.
    params_[i].register_hook([this, i](const torch::Tensor& grad) { onGradient(i, grad); });
  }
  prepareForBackward();
}

void GradientReducer::prepareForBackward() {
  for (auto& bucket : buckets_) {
    bucket.pending = bucket.params.size();
    bucket.work.reset();
  }
  gradSeen_.assign(params_.size(), false);
  gradsLeft_ = params_.size();
  nextBucket_ = 0;
}

void GradientReducer::gradientsArrivedByReplay() {
  prepareForBackward();  // what the recorded step did on the host, and a replay does not
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& bucket : buckets_) bucket.pending = 0;
  gradSeen_.assign(params_.size(), true);
  gradsLeft_ = 0;
}

void GradientReducer::onGradient(size_t param, const torch::Tensor& grad) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto [b, slot] = location_[param];
  Bucket& bucket = buckets_[b];
  bucket.flat.narrow(0, bucket.offsets[slot], grad.numel()).copy_(grad.reshape(-1));
  if (!gradSeen_[param]) {
    gradSeen_[param] = true;
    --bucket.pending;
    --gradsLeft_;
  }
  if (overlap_ && gradsLeft_ > 0) launchReadyBuckets();
}

void GradientReducer::launchReadyBuckets() {
  while (nextBucket_ < buckets_.size() && buckets_[nextBucket_].pending == 0) {
    Bucket& bucket = buckets_[nextBucket_];
    bucket.work = comm_.allreduceSumAsync(bucket.flat);
    ++nextBucket_;
  }
}

void GradientReducer::finishBackward() {
  std::lock_guard<std::mutex> lock(mutex_);
  startRemainingBuckets();
  // Bucket by bucket: a bucket's average is written while the later ones may still be reducing.
  const torch::Tensor scale = averagingScale();
  for (auto& bucket : buckets_) {
    awaitBucket(bucket);
    writeAverage(bucket, scale);
  }
}

void GradientReducer::awaitAllreduces() {
  std::lock_guard<std::mutex> lock(mutex_);
  startRemainingBuckets();
  for (auto& bucket : buckets_) awaitBucket(bucket);
}

void GradientReducer::writeAveragedGradients() {
  std::lock_guard<std::mutex> lock(mutex_);
  const torch::Tensor scale = averagingScale();
  for (const auto& bucket : buckets_) writeAverage(bucket, scale);
}

void GradientReducer::startRemainingBuckets() {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!gradSeen_[i]) {
      throw Error("parameter " + std::to_string(i) +
                  " received no gradient in this iteration; "
                  "every parameter must take part in the loss (unused parameters are not supported)");
    }
  }
  if (!overlap_) launchReadyBuckets();
}

torch::Tensor GradientReducer::averagingScale() const {
  return torch::scalar_tensor(1.0 / comm_.worldSize(), torch::kFloat64);
}

void GradientReducer::awaitBucket(Bucket& bucket) {
  if (bucket.work) {
    bucket.work->wait();
    bucket.work.reset();
  } else {
    comm_.allreduceSum(bucket.flat);  // in bucket order: every earlier bucket is done
  }
}

void GradientReducer::writeAverage(const Bucket& bucket, const torch::Tensor& scale) {
  // One pass per gradient: the average is written straight into .grad (a 1-rank group, e.g. NCCL x1, has nothing to
  // average and only copies).
  for (size_t slot = 0; slot < bucket.params.size(); ++slot) {
    torch::Tensor& p = params_[bucket.params[slot]];
    torch::Tensor grad = p.mutable_grad().view(-1);
    const torch::Tensor reduced = bucket.flat.narrow(0, bucket.offsets[slot], p.numel());
    if (comm_.worldSize() > 1) {
      at::mul_out(grad, reduced, scale);  // a CPU scalar is valid with CUDA tensors too
    } else {
      grad.copy_(reduced);
    }
  }
}

void broadcastModuleState(torch::nn::Module& module, Communicator& comm) {
  // A 1-rank group broadcasts too: its first collective sets up the communicator (NCCL's is made lazily),
  // here and not inside the first timed training step, as Python DDP's constructor does.
  if (!comm.formsGroup()) return;
  torch::NoGradGuard noGrad;
  std::vector<torch::Tensor> state;
  for (auto& p : module.parameters()) state.push_back(p);
  for (auto& b : module.buffers()) state.push_back(b);
  if (state.empty()) return;
  broadcastTensors(state, comm, 0);  // one collective per dtype: a buffer's int64 counter stays exact
}

}  // namespace ddprun::worker
