#include "launcher/worker_watch.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

namespace ddprun::launcher {
namespace {

/// Native stacks of every rank together get this long; Python tracebacks as long again.
constexpr std::chrono::milliseconds kStackBudget{3000};

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string fixed1(double value) {
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(1);
  out << value;
  return out.str();
}

}  // namespace

WorkerWatch::WorkerWatch(boost::asio::io_context& io, ChildReaper& reaper, WorkerGroup& group, HangSettings hang,
                         StragglerSettings straggler, bool pythonWorkers, HangCallback onHang)
    : io_(io), group_(group), collector_(io, reaper), monitor_(hang, straggler), straggler_(straggler),
      pythonWorkers_(pythonWorkers), onHang_(std::move(onHang)), tracebackWait_(io) {}

void WorkerWatch::startAttempt(std::vector<RankFiles> files) {
  files_ = std::move(files);
  hung_.clear();
  collecting_ = false;
  tracebackWait_.cancel();
  aborted_.clear();
  afterTracebacks_ = nullptr;
  monitor_.startAttempt(files_.size(), std::chrono::steady_clock::now());
}

void WorkerWatch::tick() {
  if (pausedAt_ != SteadyTime{} || files_.size() != group_.size()) return;
  const auto now = std::chrono::steady_clock::now();
  for (size_t local = 0; local < files_.size(); ++local) {
    RankObservation seen;
    seen.running = !group_.exit(local).has_value();
    seen.lastOutput = group_.lastOutput(local);
    seen.progress = readProgressFile(files_[local].progress);
    monitor_.observe(local, seen, now);
  }
  monitor_.sampleRates(now);
  warnStragglers(monitor_.stragglers(now));
  if (collecting_) return;
  const auto stalls = monitor_.stalls(now);
  if (!stalls.empty()) onStalls(stalls);
}

void WorkerWatch::warnStragglers(const std::vector<Straggler>& stragglers) {
  for (const Straggler& s : stragglers) {
    ++stragglersFlagged_;
    spdlog::warn("rank {} is a straggler: over the last {} s it did {:.2f} steps per {} second, the other ranks {:.2f} "
                 "(more than {}x faster)",
                 group_.globalRank(s.localRank), straggler_.windowSeconds, s.pace, s.byBusyTime ? "busy" : "wall",
                 s.othersMedian, straggler_.factor);
  }
}

WorkerFailure WorkerWatch::hangFailure(const Stall& stall) const {
  WorkerFailure failure;
  failure.globalRank = group_.globalRank(stall.localRank);
  failure.localRank = static_cast<int>(stall.localRank);
  failure.pid = group_.pid(stall.localRank);
  failure.exit.when = std::chrono::system_clock::now();
  failure.timestamp = std::chrono::duration_cast<std::chrono::seconds>(failure.exit.when.time_since_epoch()).count();
  failure.order = failure.exit.when;
  std::ostringstream message;
  if (stall.byOutput) {
    message << "Hang: no output for " << fixed1(stall.silentSeconds) << " s (--output-timeout "
            << fixed1(stall.timeoutSeconds) << " s)";
  } else {
    message << "Hang: no progress for " << fixed1(stall.silentSeconds) << " s after step " << stall.step.value_or(0)
            << (stall.phase.empty() ? "" : " (phase " + stall.phase + ")") << "; hang timeout "
            << fixed1(stall.timeoutSeconds) << " s";
  }
  failure.message = message.str();
  return failure;
}

void WorkerWatch::onStalls(const std::vector<Stall>& stalls) {
  ++hangsDetected_;
  std::vector<WorkerFailure> failures;
  for (const Stall& stall : stalls) {
    failures.push_back(hangFailure(stall));
    hung_[stall.localRank].file = files_[stall.localRank].stacks;
    spdlog::error("rank {}: {}; saving every rank's stacks", failures.back().globalRank, failures.back().message);
  }
  // Every running rank's stacks, not only the stalled ones: the others show which collective waits.
  std::vector<StackCollector::Target> targets;
  for (size_t local = 0; local < files_.size(); ++local) {
    if (!group_.exit(local)) targets.push_back({local, group_.pid(local), files_[local].stacks});
  }
  collecting_ = true;
  const auto started = std::chrono::steady_clock::now();
  collector_.collect(targets, kStackBudget, [this, failures, started](std::vector<StackCollector::Result> results) {
    collecting_ = false;
    for (const auto& result : results) {
      if (hung_.count(result.localRank)) hung_[result.localRank].nativeFrame = result.innermost;
      spdlog::info("rank {}: stacks in {}{}", group_.globalRank(result.localRank), result.file,
                   result.innermost.empty() ? "" : "; main thread in " + result.innermost);
    }
    spdlog::info("native stacks of {} rank(s) saved in {:.0f} ms", results.size(),
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count());
    nameLikelyCause();
    onHang_(failures);
  });
}

void WorkerWatch::nameLikelyCause() const {
  // In lockstep DDP every rank stops at the same step, so every rank is flagged; the stacks tell the rank
  // stuck in its own code from those waiting for it in a collective.
  std::vector<std::string> stuck, waiting;
  for (const auto& [local, hang] : hung_) {
    const std::string rank = std::to_string(group_.globalRank(local));
    (waitsInCollective(hang.nativeFrame, "") ? waiting : stuck).push_back(rank);
  }
  if (stuck.empty() || waiting.empty()) return;
  const auto join = [](const std::vector<std::string>& ranks) {
    std::string text;
    for (const auto& r : ranks) text += (text.empty() ? "" : ", ") + r;
    return text;
  };
  spdlog::warn("likely cause of the hang: rank {} (its main thread is not in a collective; rank {} wait{} for {} peers)",
               join(stuck), join(waiting), waiting.size() == 1 ? "s" : "", waiting.size() == 1 ? "its" : "their");
}

void WorkerWatch::saveTracebacksThen(std::function<void()> then) {
  std::vector<size_t> aborted;
  if (pythonWorkers_) {
    for (size_t local = 0; local < files_.size(); ++local) {
      if (group_.exit(local)) continue;
      const int fd = ::open(files_[local].stacks.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (fd < 0) continue;
      const std::string header = "\n--- Python tracebacks of every thread (faulthandler, on SIGABRT) ---\n";
      [[maybe_unused]] ssize_t n = ::write(fd, header.data(), header.size());
      group_.abortForTracebacks(local, fd);
      aborted.push_back(local);
    }
  }
  if (aborted.empty()) {
    then();
    return;
  }
  // faulthandler writes in microseconds; the wait ends as soon as every aborted worker is gone.
  aborted_ = std::move(aborted);
  afterTracebacks_ = std::move(then);
  tracebackDeadline_ = std::chrono::steady_clock::now() + kStackBudget;
  waitForTracebacks();
}

void WorkerWatch::waitForTracebacks() {
  if (!afterTracebacks_) return;  // a new attempt started meanwhile
  const bool allGone =
      std::all_of(aborted_.begin(), aborted_.end(), [this](size_t local) { return group_.finished(local); });
  if (!allGone && std::chrono::steady_clock::now() < tracebackDeadline_) {
    tracebackWait_.expires_after(std::chrono::milliseconds(20));
    tracebackWait_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) waitForTracebacks();  // a wait already due when cancelled finds afterTracebacks_ empty
    });
    return;
  }
  for (size_t local : aborted_) {
    if (hung_.count(local) == 0) continue;
    hung_[local].pythonFrame = innermostPythonFrame(readFile(files_[local].stacks));
    if (!hung_[local].pythonFrame.empty()) {
      spdlog::info("rank {}: Python main thread in {}", group_.globalRank(local), hung_[local].pythonFrame);
    }
  }
  aborted_.clear();
  auto then = std::move(afterTracebacks_);
  afterTracebacks_ = nullptr;
  then();
}

void WorkerWatch::pause() { pausedAt_ = std::chrono::steady_clock::now(); }

void WorkerWatch::resume() {
  if (pausedAt_ == SteadyTime{}) return;
  monitor_.shiftForPause(pausedAt_, std::chrono::steady_clock::now());
  pausedAt_ = SteadyTime{};
}

RankProgress WorkerWatch::progress(size_t local) const {
  return monitor_.progress(local, std::chrono::steady_clock::now());
}

std::vector<WorkerFailure> WorkerWatch::withStacks(std::vector<WorkerFailure> failures) const {
  for (auto& failure : failures) {
    const auto it = hung_.find(static_cast<size_t>(failure.localRank));
    if (it == hung_.end() || failure.message.rfind("Hang:", 0) != 0) continue;
    std::string where = "stacks of every thread: " + it->second.file;
    if (!it->second.nativeFrame.empty()) where += "\nmain thread (native): " + it->second.nativeFrame;
    if (!it->second.pythonFrame.empty()) where += "\nmain thread (Python): " + it->second.pythonFrame;
    failure.traceback = where;
    failure.waitsOnPeers = waitsInCollective(it->second.nativeFrame, it->second.pythonFrame);
  }
  return failures;
}

}  // namespace ddprun::launcher
