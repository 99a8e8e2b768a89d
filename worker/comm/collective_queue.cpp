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

CollectiveQueue::Ticket CollectiveQueue::submit(std::function<void()> job) {
  std::packaged_task<void()> task([this, job = std::move(job)] { execute(job); });
  Ticket ticket{0, task.get_future()};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ticket.id = nextId_++;
    jobs_.push_back({ticket.id, std::move(task)});
  }
  wake_.notify_one();
  return ticket;
}

void CollectiveQueue::execute(const std::function<void()>& job) {
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
}

void CollectiveQueue::run(std::function<void()> job) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (running_ || !jobs_.empty()) {
    lock.unlock();
    Ticket ticket = submit(std::move(job));
    wait(ticket);
    return;
  }
  std::packaged_task<void()> task([this, &job] { execute(job); });
  std::future<void> done = task.get_future();
  runLocked(lock, task);
  lock.unlock();
  done.get();
}

void CollectiveQueue::runLocked(std::unique_lock<std::mutex>& lock, std::packaged_task<void()>& task) {
  running_ = true;
  lock.unlock();
  task();  // a packaged_task stores the job's exception in its future
  lock.lock();
  running_ = false;
  wake_.notify_all();
}

void CollectiveQueue::wait(Ticket& ticket) {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!running_ && !jobs_.empty() && jobs_.front().id == ticket.id) {
      std::packaged_task<void()> task = std::move(jobs_.front().task);
      jobs_.pop_front();
      runLocked(lock, task);
    }
  }
  ticket.done.get();
}

void CollectiveQueue::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || (!running_ && !jobs_.empty()); });
    if (stopping_) return;
    std::packaged_task<void()> task = std::move(jobs_.front().task);
    jobs_.pop_front();
    runLocked(lock, task);
  }
}

}  // namespace ddprun::worker
