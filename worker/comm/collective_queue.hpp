#pragma once
// One helper thread that runs a communicator's collectives in the order they were submitted, so that the
// thread submitting them (backward, through autograd hooks) never waits for a peer. A thread that waits for
// a job the helper has not started yet runs it itself, and a blocking call with nothing queued runs at once:
// on a machine with as many busy ranks as cores, each hand-off to the helper costs two context switches.
// LibTorch-free.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

namespace ddprun::worker {

class CollectiveQueue {
 public:
  /// A submitted job: wait(ticket) blocks until it has run.
  struct Ticket {
    uint64_t id;
    std::future<void> done;
  };

  /// Starts the helper thread.
  CollectiveQueue();
  /// Stops taking jobs, lets the running one finish (cancel it first if it may wait long) and joins the
  /// thread; queued jobs that never ran report a broken promise to anyone still holding their ticket.
  ~CollectiveQueue();
  CollectiveQueue(const CollectiveQueue&) = delete;
  CollectiveQueue& operator=(const CollectiveQueue&) = delete;

  /// Queues `job` and returns at once. Once a job has failed, every later job fails with that same
  /// exception without running: a collective that broke leaves the ranks out of step, and nothing after it
  /// could be trusted.
  Ticket submit(std::function<void()> job);

  /// Waits until the ticket's job has run, rethrowing its exception. When it is next in line and nothing
  /// runs, the calling thread runs it.
  void wait(Ticket& ticket);

  /// Runs `job` and waits for it: at once on the calling thread when nothing is queued or running (the
  /// helper is not even woken), else behind the queued jobs.
  void run(std::function<void()> job);

 private:
  struct Job {
    uint64_t id;
    std::packaged_task<void()> task;
  };
  void loop();
  /// Runs `job` unless an earlier job failed (then rethrows that failure); records its own failure.
  void execute(const std::function<void()>& job);
  /// Runs `task` outside the lock with `running_` set; the lock is held on entry and on return.
  void runLocked(std::unique_lock<std::mutex>& lock, std::packaged_task<void()>& task);

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job> jobs_;
  uint64_t nextId_ = 0;
  bool running_ = false;        ///< a job is running (on the helper or a waiting thread)
  std::exception_ptr failure_;  ///< the first job's exception, handed to every later job
  bool stopping_ = false;
  std::thread thread_;  ///< declared last: starts once the members above exist
};

}  // namespace ddprun::worker
