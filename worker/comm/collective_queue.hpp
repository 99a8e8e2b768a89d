#pragma once
// One helper thread that runs a communicator's collectives in the order they were submitted, so that the
// thread submitting them (backward, through autograd hooks) never waits for a peer. LibTorch-free.
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

namespace ddprun::worker {

class CollectiveQueue {
 public:
  /// Starts the helper thread.
  CollectiveQueue();
  /// Stops taking jobs, lets the running one finish (cancel it first if it may wait long) and joins the
  /// thread; queued jobs that never ran report a broken promise to anyone still holding their future.
  ~CollectiveQueue();
  CollectiveQueue(const CollectiveQueue&) = delete;
  CollectiveQueue& operator=(const CollectiveQueue&) = delete;

  /// Queues `job` and returns at once; the future reports its end or rethrows its exception. Once a job
  /// has failed, every later job fails with that same exception without running: a collective that broke
  /// leaves the ranks out of step, and nothing after it could be trusted.
  std::future<void> submit(std::function<void()> job);

  /// submit(job) and wait for it (rethrowing its exception).
  void run(std::function<void()> job) { submit(std::move(job)).get(); }

 private:
  void loop();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::packaged_task<void()>> jobs_;
  std::exception_ptr failure_;  ///< the first job's exception, handed to every later job
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ddprun::worker
