#pragma once
// Test helpers that run the ranks of a group as threads of one process, after gloo's BaseTest::spawn
// (gloo/test/base_test.h): spawnRanks() starts them and rethrows the first failure, and ThreadCommunicator
// is an in-memory Communicator whose collectives meet between those threads. It checks what a real backend
// cannot: every rank must issue the same sequence of collectives (same kind, same size), and it records
// that sequence, so the gradient reducer's ordering and overlap can be asserted without processes.
#include <torch/torch.h>

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "worker/comm/communicator.hpp"

namespace ddprun::test {

/// Runs fn(rank) on `size` threads and joins them; rethrows the exception of the lowest failing rank.
inline void spawnRanks(int size, const std::function<void(int rank)>& fn) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        fn(rank);
      } catch (...) {
        errors[static_cast<size_t>(rank)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

/// One collective as a rank issued it.
struct CollectiveCall {
  std::string kind;  ///< "allreduce", "broadcast" or "barrier"
  int64_t numel = 0;
  double startedAt = 0;  ///< steady-clock seconds when the rank started it
};

/// The shared state of one in-memory group: the k-th collective of every rank meets in slot k.
class ThreadGroup {
 public:
  explicit ThreadGroup(int size, std::chrono::milliseconds timeout = std::chrono::seconds(20))
      : size_(size), timeout_(timeout), calls_(static_cast<size_t>(size)) {}

  int size() const { return size_; }

  /// Rank `rank`'s collectives in the order it started them.
  std::vector<CollectiveCall> calls(int rank) {
    std::lock_guard<std::mutex> lock(mutex_);
    return calls_[static_cast<size_t>(rank)];
  }

  /// Records rank's next collective and deposits its input (a copy of `tensor`, taken now, as a backend
  /// that starts at once would). Returns the collective's index.
  size_t start(int rank, const std::string& kind, const torch::Tensor& tensor) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& mine = calls_[static_cast<size_t>(rank)];
    const size_t index = mine.size();
    const double now = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    mine.push_back({kind, tensor.defined() ? tensor.numel() : 0, now});
    Slot& slot = slots_[index];
    if (slot.inputs.empty()) slot.inputs.resize(static_cast<size_t>(size_));
    slot.inputs[static_cast<size_t>(rank)] = tensor.defined() ? tensor.detach().clone() : torch::Tensor();
    ++slot.arrived;
    cv_.notify_all();
    return index;
  }

  /// Waits until every rank started collective `index` and returns the inputs, in rank order. Throws when
  /// the ranks disagree on the collective (kind or size) or one does not arrive within the timeout.
  std::vector<torch::Tensor> finish(int rank, size_t index) {
    std::unique_lock<std::mutex> lock(mutex_);
    Slot& slot = slots_[index];
    if (!cv_.wait_for(lock, timeout_, [&] { return slot.arrived == size_; })) {
      throw std::runtime_error("thread group: rank " + std::to_string(rank) + " waited in vain for collective " +
                               std::to_string(index));
    }
    const CollectiveCall& mine = calls_[static_cast<size_t>(rank)][index];
    for (int other = 0; other < size_; ++other) {
      const CollectiveCall& theirs = calls_[static_cast<size_t>(other)][index];
      if (theirs.kind != mine.kind || theirs.numel != mine.numel) {
        throw std::runtime_error("thread group: collective " + std::to_string(index) + " is a " + mine.kind + " of " +
                                 std::to_string(mine.numel) + " elements on rank " + std::to_string(rank) + " but a " +
                                 theirs.kind + " of " + std::to_string(theirs.numel) + " on rank " +
                                 std::to_string(other));
      }
    }
    return slot.inputs;
  }

 private:
  struct Slot {
    std::vector<torch::Tensor> inputs;
    int arrived = 0;
  };
  const int size_;
  const std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::vector<CollectiveCall>> calls_;
  std::map<size_t, Slot> slots_;
};

/// One rank of a ThreadGroup. Sums run in rank order, so every rank gets the same bits.
class ThreadCommunicator : public worker::Communicator {
 public:
  ThreadCommunicator(ThreadGroup& group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int worldSize() const override { return group_.size(); }
  std::string backendName() const override { return "threads"; }
  bool formsGroup() const override { return true; }
  torch::Device device() const override { return torch::kCPU; }

  std::unique_ptr<worker::PendingCollective> allreduceSumAsync(torch::Tensor& tensor) override {
    return std::make_unique<Pending>(group_, rank_, group_.start(rank_, "allreduce", tensor), tensor);
  }
  void broadcast(torch::Tensor& tensor, int root) override {
    auto inputs = group_.finish(rank_, group_.start(rank_, "broadcast", tensor));
    tensor.copy_(inputs[static_cast<size_t>(root)]);
  }
  void barrier() override { group_.finish(rank_, group_.start(rank_, "barrier", torch::Tensor())); }

 private:
  class Pending : public worker::PendingCollective {
   public:
    Pending(ThreadGroup& group, int rank, size_t index, torch::Tensor tensor)
        : group_(group), rank_(rank), index_(index), tensor_(std::move(tensor)) {}
    void wait() override {
      auto inputs = group_.finish(rank_, index_);
      torch::Tensor sum = inputs[0].clone();
      for (size_t r = 1; r < inputs.size(); ++r) sum += inputs[r];
      tensor_.copy_(sum);
    }

   private:
    ThreadGroup& group_;
    int rank_;
    size_t index_;
    torch::Tensor tensor_;
  };

  ThreadGroup& group_;
  int rank_;
};

}  // namespace ddprun::test
