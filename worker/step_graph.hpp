#pragma once
// --cuda-graph: a training step's device work recorded once and replayed, so that a step costs a few graph
// launches instead of tens of kernel launches from the host (torch.cuda.graphs in Python; PyTorch's notes on CUDA
// graphs, "whole-network capture"). The mechanism is behind StepRecorder so that the trainer's use of it (static
// buffers, what is recorded, when) runs on the CPU in tests with a recorder that re-runs the work.
#include <torch/torch.h>

#include <functional>
#include <memory>

namespace ddprun::worker {

/// Records device work once and replays it. The work recorded must follow CUDA's rules for stream capture: it reads
/// and writes only tensors that outlive the recording (static buffers: a replay reuses their addresses), never
/// reads a value on the host, and never synchronises.
class StepRecorder {
 public:
  virtual ~StepRecorder() = default;
  /// Runs `work` now, eagerly, where recordings run (their stream): CUDA wants such a run once before a capture
  /// (lazy initialisation, per-stream workspaces).
  virtual void warmUp(const std::function<void()>& work) = 0;
  /// Records `work` without running it; returns the recording's index for replay(). Throws ddprun::Error when the
  /// work cannot be recorded (an operation that synchronises, an unsupported op), naming the cause.
  virtual size_t record(const std::function<void()>& work) = 0;
  /// Runs recording `index` on the current stream.
  virtual void replay(size_t index) = 0;
  /// Forgets every recording (the next record() starts again from index 0).
  virtual void clear() = 0;
};

/// CUDA graphs (at::cuda::CUDAGraph) on `device`, captured on a stream of their own. Throws ddprun::Error in a
/// build without CUDA.
std::unique_ptr<StepRecorder> makeCudaGraphRecorder(const torch::Device& device);

}  // namespace ddprun::worker
