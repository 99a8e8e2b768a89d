#include "worker/comm/collective_queue.hpp"

namespace ddprun::worker {

CollectiveQueue::CollectiveQueue() : thread_([this] { loop(); }) {}

CollectiveQueue::~CollectiveQueue() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::future<void> CollectiveQueue::submit(std::function<void()> job) {
  std::packaged_task<void()> task([this, job = std::move(job)] {
    std::exception_ptr earlier;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      earlier = failure_;
    }
    if (earlier) std::rethrow_exception(earlier);
    try {
      job();
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!failure_) failure_ = std::current_exception();
      throw;
    }
  });
  std::future<void> done = task.get_future();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back(std::move(task));
  }
  wake_.notify_one();
  return done;
}

void CollectiveQueue::loop() {
  for (;;) {
    std::packaged_task<void()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (stopping_) return;
      task = std::move(jobs_.front());
      jobs_.pop_front();
    }
    task();  // a packaged_task stores the job's exception in its future
  }
}

}  // namespace ddprun::worker
