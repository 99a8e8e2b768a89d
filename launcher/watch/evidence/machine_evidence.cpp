#include "launcher/watch/evidence/machine_evidence.hpp"

#include <spdlog/spdlog.h>

#include "common/untrusted_file.hpp"

namespace ddprun::launcher {
namespace {

/// A sample of every rank, and the classification of their stacks, each get this long (on a thread of their own).
constexpr std::chrono::milliseconds kReadBudget{2000};

}  // namespace

std::unique_ptr<EvidenceReaders> EvidenceReaders::after(const EvidenceReaders& stuck) {
  auto next = std::make_unique<EvidenceReaders>();
  next->skipMemory = stuck.skipMemory;  // written only before the stuck thread began: safe to read now
  next->skipAll = stuck.skipAll;
  if (const pid_t pid = stuck.reading; pid > 0) (stuck.readingMemory ? next->skipMemory : next->skipAll).insert(pid);
  return next;
}

MachineEvidence::MachineEvidence(boost::asio::io_context& io, ChildReaper& reaper) : stacks_(io, reaper), reader_(io) {}

std::optional<ProgressRecord> MachineEvidence::progress(size_t, const std::string& file) {
  return readProgressFile(file);
}

void MachineEvidence::sample(std::vector<SampleTarget> targets, SamplesDone done) {
  auto job = [this, targets, done](EvidenceReaders& readers) -> std::function<void()> {
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
    readers.reading = -1;
    return [this, done, samples = std::move(samples), members = std::move(members)] {
      for (const auto& [pid, tree] : members) members_[pid] = tree;
      if (members_.size() > 4096) members_.clear();  // ranks of attempts long gone
      done(samples);
    };
  };
  reader_.run(std::move(job), kReadBudget, [this, done](const EvidenceReaders* stuck) {
    overran(stuck);
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
    auto classify = [saved, pids, done](EvidenceReaders& readers) -> std::function<void()> {
      readers.reading = -1;  // ddprun's own files
      std::vector<RankStacks> stacks;
      for (const auto& file : saved) {
        const std::string text = readUntrustedFile(file.file, kMaxStackFileBytes).value_or("");
        stacks.push_back({file.localRank, file.file, classifyMainThread(text, pids.at(file.localRank))});
      }
      return [done, stacks = std::move(stacks)] { done(stacks); };
    };
    reader_.run(std::move(classify), kReadBudget, [this, saved, done](const EvidenceReaders* stuck) {
      overran(stuck);
      std::vector<RankStacks> unknown;
      for (const auto& file : saved) unknown.push_back({file.localRank, file.file, {}});
      done(unknown);
    });
  });
}

void MachineEvidence::overran(const EvidenceReaders* stuck) {
  const pid_t pid = stuck != nullptr ? stuck->reading.load() : -1;
  if (reader_.givenUp()) {
    if (overrunSaid_.insert(-1).second) {
      spdlog::warn(
          "reads of the ranks got stuck {} times: ddprun reads no more evidence about them in this run "
          "(hangs are then found only by --hang-busy-timeout)",
          decltype(reader_)::kMaxAbandoned);
    }
    return;
  }
  if (!overrunSaid_.insert(pid).second) return;
  if (pid < 0) {
    spdlog::warn("reading the ranks' saved stacks took over {} s", kReadBudget.count() / 1000);
    return;
  }
  spdlog::warn(
      "reading {} of pid {} took over {} s: ddprun reads it no more (its evidence is unknown, and no hang "
      "verdict rests on it)",
      stuck->readingMemory ? "the memory" : "/proc", pid, kReadBudget.count() / 1000);
}

}  // namespace ddprun::launcher
