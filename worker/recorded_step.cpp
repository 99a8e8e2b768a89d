#include "worker/recorded_step.hpp"

namespace ddprun::worker {

RecordedStep::RecordedStep(std::unique_ptr<StepRecorder> recorder, const Split& train, int64_t batchSize, Parts parts)
    : recorder_(std::move(recorder)), train_(train), batchSize_(batchSize), parts_(std::move(parts)) {
  indices_ = torch::zeros({batchSize}, torch::TensorOptions().dtype(torch::kInt64).device(train.images.device()));
  auto imageShape = train.images.sizes().vec();
  imageShape[0] = batchSize;
  images_ = torch::empty(imageShape, train.images.options());
  labels_ = torch::empty({batchSize}, train.labels.options());
}

void RecordedStep::gatherAndBackward() {
  at::index_select_out(images_, train_.images, 0, indices_);
  at::index_select_out(labels_, train_.labels, 0, indices_);
  parts_.backward(images_, labels_);
}

double RecordedStep::run(const torch::Tensor& batchIndices) {
  indices_.copy_(batchIndices);
  if (warmUpsLeft_ > 0) {
    --warmUpsLeft_;
    double waited = 0;
    recorder_->warmUp([&] {
      gatherAndBackward();
      waited = parts_.awaitAllreduces ? parts_.awaitAllreduces(false) : 0;
      parts_.update();
    });
    return waited;
  }
  if (!recorded_) {
    // Recorded, not run: the replays below run this step. The recordings keep only `this`.
    if (parts_.awaitAllreduces) {
      backwardRecording_ = recorder_->record([this] { gatherAndBackward(); });
      updateRecording_ = recorder_->record([this] { parts_.update(); });
    } else {  // nothing to reduce: the whole step is one recording
      backwardRecording_ = recorder_->record([this] {
        gatherAndBackward();
        parts_.update();
      });
    }
    recorded_ = true;
  }
  recorder_->replay(backwardRecording_);
  if (!parts_.awaitAllreduces) return 0;
  const double waited = parts_.awaitAllreduces(true);
  recorder_->replay(updateRecording_);
  return waited;
}

void RecordedStep::reset() {
  recorder_->clear();
  recorded_ = false;
  warmUpsLeft_ = kWarmUps;
}

}  // namespace ddprun::worker
