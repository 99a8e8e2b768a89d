#include "launcher/watch/traceback_collection.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>

#include "common/untrusted_file.hpp"
#include "launcher/watch/evidence/stack_collector.hpp"

namespace ddprun::launcher {
namespace {

/// Python tracebacks get this long after SIGABRT (faulthandler writes in microseconds).
constexpr std::chrono::milliseconds kTracebackBudget{3000};
/// Flight recorder dumps get this long: torch's monitor looks at its pipe and the store about once a second, then
/// writes the dump with stack traces (4.7-6.0 s from the request for one rank on torch 2.11, H200); 15 s is torch's
/// own wait for a dump before it aborts (TORCH_FR_WAIT_TIMEOUT_DUMP_MILSEC). The wait ends when the dumps are complete.
constexpr std::chrono::milliseconds kDumpBudget{15000};
/// A dump is complete once its file has not changed for this long (DumpFileWatch). torch's monitor reads the pipe
/// and the store key within about a second of each other and builds both dumps at once; the two writes are then
/// serialised, so a second write begins well within this.
constexpr std::chrono::milliseconds kDumpQuiet{3000};

}  // namespace

TracebackCollection::TracebackCollection(boost::asio::io_context& io, const Clock& clock, WorkerGroupView& group,
                                         bool pythonWorkers, StoreKeySetter setStoreKey)
    : io_(io), clock_(clock), group_(group), pythonWorkers_(pythonWorkers), setStoreKey_(std::move(setStoreKey)) {}

void TracebackCollection::reset(const std::vector<RankFiles>* files) {
  files_ = files;
  ++generation_;
  step_ = Step::kIdle;
  culprit_ = -1;
  hung_.clear();
  dumps_.clear();
  aborted_.clear();
  onDone_ = nullptr;
}

void TracebackCollection::noteHung(size_t local, const std::string& nativeFrame, int culprit) {
  hung_[local].nativeFrame = nativeFrame;
  if (culprit_ < 0) culprit_ = culprit;
}

void TracebackCollection::start(std::function<void()> onDone) {
  onDone_ = std::move(onDone);
  step_ = Step::kDumps;
  // Each dump file as it was before the request: a file already there is no answer until it changes.
  std::map<size_t, DumpFileWatch> before;
  for (size_t local = 0; local < files_->size(); ++local) {
    before.emplace(local, DumpFileWatch((*files_)[local].flightRecorder.dumpFile));
  }
  const auto asked = requestDumps();
  dumps_.clear();
  for (size_t local : asked) dumps_.emplace(local, before.at(local));
  deadline_ = clock_.now() + kDumpBudget;
  if (!asked.empty()) {
    spdlog::info("asked rank(s) {} for their NCCL flight recorder dumps (at most {} s)", rankList(asked),
                 std::chrono::duration_cast<std::chrono::seconds>(kDumpBudget).count());
    return;  // the next ticks look at the files
  }
  // Continued on the loop, never inside the caller (the policy asked from one of its event methods).
  boost::asio::post(io_, [this, generation = generation_] {
    if (generation == generation_ && step_ == Step::kDumps) abortForTracebacks();
  });
}

void TracebackCollection::tick() {
  if (step_ == Step::kDumps && !dumps_.empty()) waitForDumps();
  if (step_ == Step::kTracebacks) waitForTracebacks();
}

std::vector<size_t> TracebackCollection::requestDumps() {
  // The key first: every NCCL rank of the job, also on other nodes, polls it about once a second, and torch's
  // monitor looks at the key before the pipe in each round and leaves its loop on the key, so a rank that both
  // reach usually dumps once. The pipe reaches the local ranks the key does not (no agent store).
  const bool keySet = setStoreKey_ && setStoreKey_(kDumpStoreKey, dumpKeyValue(culprit_));
  std::vector<size_t> asked;
  for (size_t local = 0; local < files_->size(); ++local) {
    const std::string& pipe = (*files_)[local].flightRecorder.pipeFile;
    if (group_.exit(local) || pipe.empty()) continue;
    if (pokeDumpPipe(pipe)) asked.push_back(local);
  }
  if (keySet && asked.empty()) {
    spdlog::debug("set {} in the workers' store; no local rank has a flight recorder pipe", kDumpStoreKey);
  }
  return asked;
}

void TracebackCollection::waitForDumps() {
  const auto now = clock_.now();
  std::map<size_t, bool> settled;
  bool all = true;
  for (auto& [local, dump] : dumps_) all = (settled[local] = dump.settled(now, kDumpQuiet)) && all;
  if (!all && now < deadline_) return;  // the next tick looks again
  const auto budget = std::chrono::duration_cast<std::chrono::seconds>(kDumpBudget).count();
  for (const auto& [local, dump] : dumps_) {
    const int rank = group_.globalRank(local);
    if (!dump.written()) {
      spdlog::warn("rank {}: no NCCL flight recorder dump in {} within {} s{}", rank, dump.file(), budget,
                   dump.onlyOlder() ? " (the file there predates this hang: an earlier dump, left as it was)" : "");
      continue;
    }
    hung_[local].flightRecorderDump = dump.file();
    if (settled[local]) {
      spdlog::info(
          "rank {}: NCCL flight recorder dump in {} (read it with python -m "
          "torch.distributed.flight_recorder.fr_trace)",
          rank, dump.file());
    } else {
      spdlog::warn("rank {}: NCCL flight recorder dump in {} was still being written after {} s: it may be cut off",
                   rank, dump.file(), budget);
    }
  }
  dumps_.clear();
  abortForTracebacks();
}

void TracebackCollection::abortForTracebacks() {
  std::vector<size_t> aborted;
  if (pythonWorkers_) {
    for (size_t local = 0; local < files_->size(); ++local) {
      if (!group_.exit(local)) aborted.push_back(local);
    }
  }
  if (!aborted.empty()) {
    spdlog::info(
        "ddprun sends SIGABRT to rank(s) {} for their Python tracebacks (saved with their stacks): the "
        "\"Fatal Python error: Aborted\" that follows is ddprun's doing, not a crash",
        rankList(aborted));
  }
  for (size_t local : aborted) {
    const std::string& stacks = (*files_)[local].stacks;
    const int fd = ::open(stacks.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) continue;
    const std::string header = "\n--- Python tracebacks of every thread (faulthandler, on SIGABRT) ---\n";
    [[maybe_unused]] ssize_t n = ::write(fd, header.data(), header.size());
    group_.abortForTracebacks(local, fd);
  }
  aborted_ = std::move(aborted);
  deadline_ = clock_.now() + kTracebackBudget;
  step_ = Step::kTracebacks;
  waitForTracebacks();
}

void TracebackCollection::waitForTracebacks() {
  // faulthandler writes in microseconds; the wait ends as soon as every aborted worker is gone.
  const bool allGone =
      std::all_of(aborted_.begin(), aborted_.end(), [this](size_t local) { return group_.finished(local); });
  if (!allGone && clock_.now() < deadline_) return;  // the next tick looks again
  for (size_t local : aborted_) {
    if (hung_.count(local) == 0) continue;
    const auto text = readUntrustedFile((*files_)[local].stacks, kMaxStackFileBytes);
    hung_[local].pythonFrame = text ? innermostPythonFrame(*text) : "";
    if (!hung_[local].pythonFrame.empty()) {
      spdlog::info("rank {}: Python main thread in {}", group_.globalRank(local), hung_[local].pythonFrame);
    }
  }
  aborted_.clear();
  step_ = Step::kIdle;
  auto done = std::move(onDone_);
  onDone_ = nullptr;
  if (done) done();
}

std::vector<WorkerFailure> TracebackCollection::complete(std::vector<WorkerFailure> failures) const {
  for (auto& failure : failures) {
    const auto local = static_cast<size_t>(failure.localRank);
    const auto it = hung_.find(local);
    if (it == hung_.end() || files_ == nullptr || local >= files_->size() ||
        (failure.cause != FailureCause::kHang && failure.cause != FailureCause::kOutputSilence)) {
      continue;
    }
    const std::string& file = (*files_)[local].stacks;
    std::string where = "stacks of every thread: " + file;
    if (!it->second.nativeFrame.empty()) where += "\nmain thread (native): " + it->second.nativeFrame;
    if (!it->second.pythonFrame.empty()) where += "\nmain thread (Python): " + it->second.pythonFrame;
    if (!it->second.flightRecorderDump.empty()) where += "\nNCCL flight recorder: " + it->second.flightRecorderDump;
    failure.flightRecorderDump = it->second.flightRecorderDump;
    failure.traceback = where;
    failure.stacksFile = file;
    failure.waitsOnPeers = failure.waitsOnPeers || waitsInCollective(it->second.nativeFrame, it->second.pythonFrame);
    if (local < group_.size() && group_.exit(local)) failure.exit = *group_.exit(local);
  }
  return failures;
}

std::string TracebackCollection::rankList(const std::vector<size_t>& locals) const {
  std::string text;
  for (size_t local : locals) text += (text.empty() ? "" : ", ") + std::to_string(group_.globalRank(local));
  return text;
}

}  // namespace ddprun::launcher
