#include "worker/step_graph.hpp"

#include <string>
#include <vector>

#include "common/error.hpp"

#ifdef DDPRUN_WITH_CUDA
#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace ddprun::worker {

#ifdef DDPRUN_WITH_CUDA
namespace {

/// Turns autocast's cache of cast weights off for its lifetime: casts cached inside a capture would be freed when
/// the cache is cleared, under the graph (PyTorch's notes on CUDA graphs: autocast with cache_enabled=False).
class AutocastCacheOff {
 public:
  AutocastCacheOff() : was_(at::autocast::is_autocast_cache_enabled()) {
    at::autocast::set_autocast_cache_enabled(false);
  }
  ~AutocastCacheOff() { at::autocast::set_autocast_cache_enabled(was_); }
  AutocastCacheOff(const AutocastCacheOff&) = delete;
  AutocastCacheOff& operator=(const AutocastCacheOff&) = delete;

 private:
  bool was_;
};

class CudaGraphRecorder : public StepRecorder {
 public:
  explicit CudaGraphRecorder(const torch::Device& device)
      : device_(device), stream_(c10::cuda::getStreamFromPool(false, device.index())) {}

  void warmUp(const std::function<void()>& work) override { onOwnStream(work); }

  size_t record(const std::function<void()>& work) override {
    auto graph = std::make_unique<at::cuda::CUDAGraph>();
    // Everything queued before, done: as torch.cuda.graph does. A collective still queued for c10d's watchdog, whose
    // event query from its own thread could otherwise invalidate a capture in global mode (pytorch/pytorch#104487).
    torch::cuda::synchronize(device_.index());
    try {
      AutocastCacheOff cacheOff;
      onOwnStream([&] {
        graph->capture_begin();  // a capture must not run on the default stream
        try {
          work();
        } catch (...) {
          endFailedCapture(*graph);
          throw;
        }
        graph->capture_end();
      });
    } catch (const std::exception& e) {
      // Kept, not destroyed: a capture_end that threw left the caching allocator holding a filter that points at the
      // graph (CUDAGraph.cpp ends its allocation to the pool only after a successful cudaStreamEndCapture).
      (void)graph.release();  // NOLINT(bugprone-unused-return-value): deliberately leaked
      throw Error("the training step could not be recorded as a CUDA graph (" + firstLine(e.what()) +
                  "); run with --cuda-graph off");
    }
    graphs_.push_back(std::move(graph));
    return graphs_.size() - 1;
  }

  void replay(size_t index) override { graphs_.at(index)->replay(); }

  void clear() override {
    torch::cuda::synchronize(device_.index());  // no replay in flight uses a graph's memory any more
    graphs_.clear();
  }

 private:
  /// Runs `work` with the recorder's stream current, ordered after the work queued before it and before the work
  /// queued after it.
  void onOwnStream(const std::function<void()>& work) {
    const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(device_.index());
    at::cuda::CUDAEvent queuedBefore;
    queuedBefore.record(current);
    queuedBefore.block(stream_);
    try {
      c10::cuda::CUDAStreamGuard onStream(stream_);
      work();
    } catch (...) {
      orderAfterOwnStream(current);  // what the work queued before it failed comes before anything queued later
      throw;
    }
    orderAfterOwnStream(current);
  }

  void orderAfterOwnStream(const c10::cuda::CUDAStream& current) {
    at::cuda::CUDAEvent done;
    done.record(stream_);
    done.block(current);
  }

  /// Takes the stream out of capture mode after a failure inside the capture (its own error is the one reported).
  static void endFailedCapture(at::cuda::CUDAGraph& graph) {
    try {
      graph.capture_end();
    } catch (...) {  // NOLINT(bugprone-empty-catch): an invalidated capture fails to end, but it has ended
    }
  }

  torch::Device device_;
  c10::cuda::CUDAStream stream_;
  std::vector<std::unique_ptr<at::cuda::CUDAGraph>> graphs_;
};

}  // namespace

std::unique_ptr<StepRecorder> makeCudaGraphRecorder(const torch::Device& device) {
  return std::make_unique<CudaGraphRecorder>(device);
}
#else
std::unique_ptr<StepRecorder> makeCudaGraphRecorder(const torch::Device&) {
  throw Error("--cuda-graph: this worker was built without CUDA");
}
#endif

}  // namespace ddprun::worker
