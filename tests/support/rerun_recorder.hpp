#pragma once
// A StepRecorder for tests on the CPU (worker/step_graph.hpp): warmUp() runs the work, record() keeps it without
// running it, replay() runs it again, each counted. What it proves is the callers' side of --cuda-graph (static
// buffers, what is recorded and when); what a CUDA graph skips at replay (the host's side of the recorded work) it
// still runs.
#include <functional>
#include <vector>

#include "common/error.hpp"
#include "worker/step_graph.hpp"

namespace ddprun::test {

class RerunRecorder : public worker::StepRecorder {
 public:
  struct Counts {
    int warmUps = 0, records = 0, replays = 0, clears = 0;
  };
  explicit RerunRecorder(Counts& counts) : counts_(counts) {}
  bool refuse = false;  ///< record() throws, as a CUDA capture of an unsupported operation does
  void warmUp(const std::function<void()>& work) override {
    ++counts_.warmUps;
    work();
  }
  size_t record(const std::function<void()>& work) override {
    if (refuse) throw Error("the work could not be recorded (RerunRecorder::refuse)");
    ++counts_.records;
    works_.push_back(work);
    return works_.size() - 1;
  }
  void replay(size_t index) override {
    ++counts_.replays;
    works_.at(index)();
  }
  void clear() override {
    ++counts_.clears;
    works_.clear();
  }

 private:
  Counts& counts_;
  std::vector<std::function<void()>> works_;
};

}  // namespace ddprun::test
