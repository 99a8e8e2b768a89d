#include "launcher/watch/evidence/machine_evidence.hpp"

#include <spdlog/spdlog.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "common/untrusted_file.hpp"

namespace ddprun::launcher {
namespace {

/// A sample of every rank, and the classification of their stacks, each get this long (on a thread of their own).
constexpr std::chrono::milliseconds kReadBudget{2000};

}  // namespace

struct OffLoopReader::Worker {
  struct Task {
    uint64_t id = 0;
    Job job;
  };
  boost::asio::io_context* io = nullptr;
  std::weak_ptr<bool> alive;  ///< the reader; gone: nothing the thread returns may run
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<Task> tasks;
  uint64_t running = 0;  ///< the job on the thread now; 0: none
  bool stop = false;     ///< the thread ends after its job
  bool dropped = false;  ///< what the thread returns from now on is dropped (abandoned, or the reader is gone)
  Readers readers;
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
        result = task.job(readers);
      } catch (const std::exception&) {
        result = nullptr;  // whatever a read met (an allocation it could not make) is no result, never an end
      }
      std::lock_guard lock(mutex);
      running = 0;
      readers.reading = -1;
      if (!dropped && result) {
        boost::asio::post(*io, [alive = alive, result = std::move(result)] {
          if (alive.lock()) result();
        });
      }
      if (stop) return;
    }
  }
};

OffLoopReader::OffLoopReader(boost::asio::io_context& io) : io_(io), alive_(std::make_shared<bool>(true)) {
  worker_ = start({}, {});
}

OffLoopReader::~OffLoopReader() {
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

std::shared_ptr<OffLoopReader::Worker> OffLoopReader::start(std::set<pid_t> skipMemory, std::set<pid_t> skipAll) {
  auto worker = std::make_shared<Worker>();
  worker->io = &io_;
  worker->alive = alive_;
  worker->readers.skipMemory = std::move(skipMemory);
  worker->readers.skipAll = std::move(skipAll);
  worker->thread = std::thread([worker] { worker->loop(); });
  return worker;
}

void OffLoopReader::run(Job job, std::chrono::milliseconds budget, Overrun onOverrun) {
  if (abandoned_ >= kMaxAbandoned) {
    boost::asio::post(io_, [onOverrun] { onOverrun(-1, false); });
    return;
  }
  const uint64_t id = ++nextJob_;
  {
    std::lock_guard lock(worker_->mutex);
    worker_->tasks.push_back({id, std::move(job)});
  }
  worker_->wake.notify_one();
  auto timer = std::make_shared<boost::asio::steady_timer>(io_, budget);
  timers_[id] = timer;
  timer->async_wait([this, id, onOverrun = std::move(onOverrun)](const boost::system::error_code& ec) {
    if (ec) return;  // cancelled: the reader is gone
    timers_.erase(id);
    abandon(id, onOverrun);
  });
}

void OffLoopReader::abandon(uint64_t id, const Overrun& onOverrun) {
  std::shared_ptr<Worker> stuck = worker_;
  std::deque<Worker::Task> pending;
  std::set<pid_t> skipMemory, skipAll;
  pid_t pid = -1;
  bool memory = false;
  {
    std::lock_guard lock(stuck->mutex);
    if (stuck->running != id) return;  // done in time (its result is on its way), or not begun yet
    stuck->stop = stuck->dropped = true;
    pending = std::move(stuck->tasks);
    pid = stuck->readers.reading;
    memory = stuck->readers.readingMemory;
    skipMemory = stuck->readers.skipMemory;
    skipAll = stuck->readers.skipAll;
  }
  stuck->thread.detach();
  ++abandoned_;
  if (pid > 0) (memory ? skipMemory : skipAll).insert(pid);
  if (abandoned_ < kMaxAbandoned) {
    worker_ = start(std::move(skipMemory), std::move(skipAll));
    {
      std::lock_guard lock(worker_->mutex);
      worker_->tasks = std::move(pending);
    }
    worker_->wake.notify_one();
  } else {
    worker_ = start({}, {});  // idle: every later job fails at once
  }
  onOverrun(pid, memory);
}

MachineEvidence::MachineEvidence(boost::asio::io_context& io, ChildReaper& reaper) : stacks_(io, reaper), reader_(io) {}

std::optional<ProgressRecord> MachineEvidence::progress(size_t, const std::string& file) {
  return readProgressFile(file);
}

void MachineEvidence::sample(std::vector<SampleTarget> targets, SamplesDone done) {
  auto job = [this, targets, done](OffLoopReader::Readers& readers) -> std::function<void()> {
    std::vector<RankSample> samples;
    std::map<pid_t, std::vector<pid_t>> members;
    for (const SampleTarget& target : targets) {
      if (readers.skipAll.count(target.pid) != 0) continue;  // a read of it got stuck once: unknown
      readers.reading = target.pid;
      readers.readingMemory = false;
      RankSample sample;
      sample.localRank = target.localRank;
      sample.counters =
          readers.sampler.sample(target.pid, std::chrono::steady_clock::now(), target.sockets, target.freshTree);
      if (target.python && readers.skipMemory.count(target.pid) == 0) {
        readers.readingMemory = true;
        sample.python = readers.python.read(target.pid);
      }
      sample.at = std::chrono::steady_clock::now();
      members[target.pid] = readers.sampler.members(target.pid);
      samples.push_back(std::move(sample));
    }
    return [this, done, samples = std::move(samples), members = std::move(members)] {
      for (const auto& [pid, tree] : members) members_[pid] = tree;
      if (members_.size() > 4096) members_.clear();  // ranks of attempts long gone
      done(samples);
    };
  };
  reader_.run(std::move(job), kReadBudget, [this, done](pid_t pid, bool memory) {
    overran(pid, memory);
    done({});
  });
}

void MachineEvidence::collectStacks(std::vector<StackTarget> targets, std::chrono::milliseconds budget,
                                    StacksDone done) {
  std::vector<StackCollector::Target> jobs;
  std::map<size_t, pid_t> pids;
  for (const StackTarget& target : targets) {
    StackCollector::Target job{target.localRank, target.pid, target.file, {}};
    for (pid_t member : members_[target.pid]) {
      if (member != target.pid && job.children.size() < kMaxStackChildren) job.children.push_back(member);
    }
    pids[target.localRank] = target.pid;
    jobs.push_back(std::move(job));
  }
  stacks_.collect(std::move(jobs), budget, [this, pids, done](std::vector<StackCollector::Saved> saved) {
    auto classify = [saved, pids, done](OffLoopReader::Readers&) -> std::function<void()> {
      std::vector<RankStacks> stacks;
      for (const auto& file : saved) {
        const std::string text = readUntrustedFile(file.file, kMaxStackFileBytes).value_or("");
        stacks.push_back({file.localRank, file.file, classifyMainThread(text, pids.at(file.localRank))});
      }
      return [done, stacks = std::move(stacks)] { done(stacks); };
    };
    reader_.run(std::move(classify), kReadBudget, [this, saved, done](pid_t pid, bool memory) {
      overran(pid, memory);
      std::vector<RankStacks> unknown;
      for (const auto& file : saved) unknown.push_back({file.localRank, file.file, {}});
      done(unknown);
    });
  });
}

void MachineEvidence::overran(pid_t pid, bool memory) {
  if (pid < 0 && !reader_.givenUp()) {
    if (overrunSaid_.insert(0).second)
      spdlog::warn("reading the ranks' saved stacks took over {} s", kReadBudget.count() / 1000);
    return;
  }
  if (pid < 0) {
    if (overrunSaid_.insert(-1).second) {
      spdlog::warn(
          "reads of the ranks got stuck {} times: ddprun reads no more evidence about them in this run "
          "(hangs are then found only by --hang-busy-timeout)",
          OffLoopReader::kMaxAbandoned);
    }
    return;
  }
  if (!overrunSaid_.insert(pid).second) return;
  spdlog::warn(
      "reading {} of pid {} took over {} s: ddprun reads it no more (its evidence is unknown, and no hang "
      "verdict rests on it)",
      memory ? "the memory" : "/proc", pid, kReadBudget.count() / 1000);
}

}  // namespace ddprun::launcher
