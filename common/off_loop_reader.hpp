#pragma once
// Reads that may never come back (another process's memory or /proc, files it names, a hung file system), run where
// they cannot stop an Asio loop. Jobs run in order on a thread of their own; what a job returns runs on the loop. A job
// that overruns its budget is abandoned: what it returns is dropped, its thread is left to end by itself (it touches
// only its own State), and a new thread, with a State made from the stuck one (State::after: what it must not read
// again), takes the jobs after it; after kMaxAbandoned such threads every job fails at once. The loop never waits:
// not for a stuck job, not when the reader is destroyed.
//
// State: what one thread's jobs use (readers and their caches), never touched by two threads, with a static
// `std::unique_ptr<State> after(const State& stuck)` (called on the loop while the stuck thread may still run: it may
// read only what that thread publishes atomically).
#include <boost/asio.hpp>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

namespace ddprun {

template <typename State>
class OffLoopReader {
 public:
  /// Runs on the reader's thread; what it returns (if anything) runs on the loop.
  using Job = std::function<std::function<void()>(State&)>;
  /// Runs on the loop when a job was abandoned, with the State it got stuck in (nullptr: the reader gave up before).
  using Overrun = std::function<void(const State* stuck)>;

  static constexpr int kMaxAbandoned = 4;

  explicit OffLoopReader(boost::asio::io_context& io) : io_(io), alive_(std::make_shared<bool>(true)) {
    worker_ = start(std::make_unique<State>());
  }
  // The budget counts from the job's start: a job queued behind another is given its whole budget once it starts.
  ~OffLoopReader() {
    for (auto& [id, timer] : timers_) timer->cancel();
    bool idle = false;
    {
      std::lock_guard lock(worker_->mutex);
      worker_->stop = worker_->dropped = true;
      worker_->tasks.clear();
      idle = worker_->running == 0;
    }
    worker_->wake.notify_all();
    // A thread between jobs ends at once; one in a job (perhaps stuck in a read) ends by itself, dropping its result.
    if (idle) {
      worker_->thread.join();
    } else {
      worker_->thread.detach();
    }
  }
  OffLoopReader(const OffLoopReader&) = delete;
  OffLoopReader& operator=(const OffLoopReader&) = delete;

  /// Queues `job`; `onOverrun` runs on the loop, and nothing the job returns does, when it runs past `budget` (or
  /// when the reader has given up).
  void run(Job job, std::chrono::milliseconds budget, Overrun onOverrun) {
    if (givenUp()) {
      boost::asio::post(io_, [onOverrun] { onOverrun(nullptr); });
      return;
    }
    const uint64_t id = ++nextJob_;
    {
      std::lock_guard lock(worker_->mutex);
      worker_->tasks.push_back({id, std::move(job)});
    }
    worker_->wake.notify_one();
    open_.insert(id);
    watch(id, budget, std::move(onOverrun));
  }
  /// Whether kMaxAbandoned threads got stuck: jobs fail at once.
  bool givenUp() const { return abandoned_ >= kMaxAbandoned; }

 private:
  struct Worker {
    struct Task {
      uint64_t id = 0;
      Job job;
    };
    boost::asio::io_context* io = nullptr;
    OffLoopReader* owner = nullptr;
    std::weak_ptr<bool> alive;  ///< the reader; gone: nothing the thread returns may run
    std::mutex mutex;
    std::condition_variable wake;
    std::deque<Task> tasks;
    uint64_t running = 0;         ///< the job on the thread now; 0: none
    std::set<uint64_t> finished;  ///< jobs done whose budget has not been looked at yet
    bool stop = false;            ///< the thread ends after its job
    bool dropped = false;         ///< what the thread returns from now on is dropped (abandoned, or the reader is gone)
    std::unique_ptr<State> state;
    std::thread thread;

    void loop() {
      for (;;) {
        Task task;
        {
          std::unique_lock lock(mutex);
          wake.wait(lock, [this] { return stop || !tasks.empty(); });
          if (stop) return;
          task = std::move(tasks.front());
          tasks.pop_front();
          running = task.id;
        }
        std::function<void()> result;
        try {
          result = task.job(*state);
        } catch (const std::exception&) {
          result = nullptr;  // whatever a read met (an allocation it could not make) is no result, never an end
        }
        std::lock_guard lock(mutex);
        running = 0;
        finished.insert(task.id);
        if (finished.size() > 64) finished.erase(finished.begin());  // long looked at (ids only grow)
        if (!dropped) {
          boost::asio::post(*io, [alive = alive, owner = owner, id = task.id, result = std::move(result)] {
            if (!alive.lock() || owner->open_.erase(id) == 0) return;  // gone, or taken for an overrun meanwhile
            if (result) result();
          });
        }
        if (stop) return;
      }
    }
  };

  std::shared_ptr<Worker> start(std::unique_ptr<State> state) {
    auto worker = std::make_shared<Worker>();
    worker->io = &io_;
    worker->owner = this;
    worker->alive = alive_;
    worker->state = std::move(state);
    worker->thread = std::thread([worker] { worker->loop(); });
    return worker;
  }

  /// Looks at job `id` `budget` from now: done, it is forgotten; still queued, it gets its budget again; running,
  /// it is abandoned; dropped (the reader gave up), its caller hears so.
  void watch(uint64_t id, std::chrono::milliseconds budget, Overrun onOverrun) {
    auto timer = std::make_shared<boost::asio::steady_timer>(io_, budget);
    timers_[id] = timer;
    timer->async_wait([this, id, budget, onOverrun = std::move(onOverrun)](const boost::system::error_code& ec) {
      if (ec) return;  // cancelled: the reader is gone
      timers_.erase(id);
      if (open_.count(id) == 0) return;  // done, and what it returned has run
      bool queued = false;
      bool running = false;
      {
        std::lock_guard lock(worker_->mutex);
        if (worker_->finished.erase(id) != 0) return;  // done; what it returned is on its way
        for (const auto& task : worker_->tasks) queued = queued || task.id == id;
        running = worker_->running == id;
      }
      if (queued) {
        watch(id, budget, onOverrun);
        return;
      }
      open_.erase(id);
      if (running) {
        abandon(onOverrun);
      } else {
        onOverrun(nullptr);  // dropped when the reader gave up
      }
    });
  }

  void abandon(const Overrun& onOverrun) {
    std::shared_ptr<Worker> stuck = worker_;
    std::deque<typename Worker::Task> pending;
    {
      std::lock_guard lock(stuck->mutex);
      stuck->stop = stuck->dropped = true;
      pending = std::move(stuck->tasks);
    }
    stuck->thread.detach();
    ++abandoned_;
    worker_ = start(givenUp() ? std::make_unique<State>() : State::after(*stuck->state));
    if (!givenUp()) {
      {
        std::lock_guard lock(worker_->mutex);
        worker_->tasks = std::move(pending);
      }
      worker_->wake.notify_one();
    }
    onOverrun(stuck->state.get());
  }

  boost::asio::io_context& io_;
  std::shared_ptr<bool> alive_;  ///< results posted to the loop run only while the reader lives
  std::shared_ptr<Worker> worker_;
  std::map<uint64_t, std::shared_ptr<boost::asio::steady_timer>> timers_;  ///< each job's budget
  std::set<uint64_t> open_;  ///< jobs whose result or overrun has not run yet
  uint64_t nextJob_ = 0;
  int abandoned_ = 0;
};

}  // namespace ddprun
