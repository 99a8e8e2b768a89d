#pragma once
// Replays a recorded watch trace (launcher/watch/evidence_trace.hpp, recorded with ddprun --watch-record) through the
// real WorkerWatch on a fake clock: the trace plays both the worker group and the evidence source, answering each
// question at time t with what the recording last saw at or before t (a look at the stacks is answered when the
// recorded look ended). No processes, no sleeps: a trace of minutes replays in milliseconds. The first attempt is
// replayed, up to the first hang verdict.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdlib>

#include <boost/asio.hpp>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "launcher/watch/evidence_trace.hpp"
#include "launcher/watch/worker_watch.hpp"
#include "support/fake_clock.hpp"
#include "support/watch_trace_reader.hpp"

namespace ddprun::test {

/// What the watch concluded on a trace, in seconds since the recording began.
struct ReplayOutcome {
  std::optional<double> hangAt;
  std::vector<int> culprits;  ///< global ranks the hang verdict held responsible
  std::string hangMessage;    ///< a culprit's failure message
  std::optional<double> spinAt;
  std::optional<double> stragglerAt;
  double end = 0;  ///< where the replay stopped
};

class TraceWorld : public launcher::WorkerGroupView, public launcher::EvidenceSource {
 public:
  using Time = std::chrono::steady_clock::time_point;
  TraceWorld(const launcher::Trace& trace, const Clock& clock, boost::asio::io_context& io, Time start)
      : clock_(clock), io_(io), start_(start) {
    for (const auto& event : trace.events) {
      if (event.kind == "rank") {
        auto& rank = ranks_[event.rank];
        if (rank.pid == 0) {
          rank.pid = event.value.at("pid").get<pid_t>();
          rank.global = event.value.at("global").get<int>();
        } else if (event.value.at("pid").get<pid_t>() != rank.pid && event.t < attemptEnd) {
          attemptEnd = event.t;  // a new process in its place: the first attempt is over
        }
        continue;
      }
      if (event.kind == "tick") {
        ticks.push_back(event.t);
        continue;
      }
      events_[{event.rank, event.kind}].push_back(&event);
      if (event.kind == "stacks") looks_.push_back(&event);
      lastEvent = std::max(lastEvent, event.t);
    }
    attemptEnd = std::min(attemptEnd, lastEvent + 2);  // what was seen last stays true a moment longer
    exits_.resize(ranks_.size());
    removeLooks();
  }

  double attemptEnd = 1e18;  ///< seconds: where the first attempt ends (or the trace)
  double lastEvent = 0;
  std::vector<double> ticks;  ///< when the recorded watch ticked

  // WorkerGroupView
  size_t size() const override { return ranks_.size(); }
  pid_t pid(size_t local) const override { return ranks_.at(local).pid; }
  int globalRank(size_t local) const override { return ranks_.at(local).global; }
  const std::optional<launcher::WorkerExit>& exit(size_t local) const override {
    const auto* event = latest(local, "exit");
    exits_[local].reset();
    if (event != nullptr) {
      launcher::WorkerExit exit;
      exit.exitCode = event->value.at("code").get<int>();
      exit.signal = event->value.at("signal").get<int>();
      exits_[local] = exit;
    }
    return exits_[local];
  }
  Time lastOutput(size_t local) const override {
    const auto* event = latest(local, "output");
    return event == nullptr || event->value.is_null() ? Time{} : at(event->value.get<double>());
  }
  bool finished(size_t local) const override { return exit(local).has_value(); }
  bool outputHeld(size_t local) const override {
    const auto* event = latest(local, "held");
    return event != nullptr && event->value.get<bool>();
  }
  void abortForTracebacks(size_t, int fd) override { ::close(fd); }

  // EvidenceSource
  std::optional<ProgressRecord> progress(size_t local, const std::string&) override {
    const auto* event = latest(local, "progress");
    if (event == nullptr || event->value.is_null()) return std::nullopt;
    ProgressRecord record;
    record.step = event->value.at("step").get<int64_t>();
    if (!event->value.at("samples").is_null()) record.samples = event->value.at("samples").get<int64_t>();
    record.phase = event->value.at("phase").get<std::string>();
    if (!event->value.at("busy").is_null()) record.busySeconds = event->value.at("busy").get<double>();
    return record;
  }
  void sample(std::vector<SampleTarget> targets, SamplesDone done) override {
    // Answered at once, as read now, from the recorded samples around now (the replayed watch may ask at other
    // moments than the recorded one did); after the last recorded one, held: what was seen last is taken to be true.
    const double now = seconds(clock_.now());
    std::vector<launcher::RankSample> samples;
    for (const auto& target : targets) {
      auto sample = interpolated(target.localRank, now);
      if (!sample) continue;  // not read yet in the recording: unknown
      sample->counters.socketsRead = sample->counters.socketsRead && target.sockets;
      if (target.python) sample->python = latestPython(target.localRank, now);
      samples.push_back(std::move(*sample));
    }
    spdlog::debug("replay {:.3f}: {} sample(s) asked", now, samples.size());
    boost::asio::post(io_, [done, samples] { done(samples); });
  }
  void collectStacks(std::vector<StackTarget> targets, std::chrono::milliseconds budget, StacksDone done) override {
    // The recorded look asked for nearest to now (or, when the recording looked no more, its last look), answered when
    // it ended.
    const double now = seconds(clock_.now());
    double answerAt = now + std::chrono::duration<double>(budget).count();
    std::vector<launcher::RankStacks> stacks;
    for (const auto& target : targets) {
      const launcher::TraceEvent* best = nullptr;
      for (const auto* look : looks_) {
        if (look->rank != target.localRank) continue;
        const double asked = look->value.at("asked").get<double>();
        if (best == nullptr || std::abs(asked - now) < std::abs(best->value.at("asked").get<double>() - now)) {
          best = look;
        }
      }
      launcher::RankStacks saved{target.localRank, target.file, {}};
      if (best != nullptr) {
        saved.thread = launcher::threadFromJson(best->value);
        answerAt = std::min(answerAt, std::max(now, best->t - best->value.at("asked").get<double>() + now));
      }
      stacks.push_back(std::move(saved));
    }
    spdlog::debug("replay {:.3f}: stacks asked, answered at {:.3f}", now, answerAt);
    pending_.push_back({answerAt, [done, stacks] { done(stacks); }});
  }

  /// When the next answer is due (seconds; a large number when none is).
  double nextAnswer() const {
    double next = 1e18;
    for (const auto& [when, answer] : pending_) next = std::min(next, when);
    return next;
  }
  /// Runs the samples and looks whose answers are due by now (the clock moves in milliseconds).
  void deliver() {
    const double now = seconds(clock_.now()) + 0.001;
    for (size_t i = 0; i < pending_.size();) {
      if (pending_[i].first <= now) {
        auto answer = std::move(pending_[i].second);
        pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
        answer();
      } else {
        ++i;
      }
    }
  }

 private:
  struct Rank {
    pid_t pid = 0;
    int global = 0;
  };
  Time at(double seconds) const { return start_ + std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6)); }
  double seconds(Time time) const { return std::chrono::duration<double>(time - start_).count(); }
  /// The last `kind` event of `local` at or before now.
  const launcher::TraceEvent* latest(size_t local, const std::string& kind) const {
    const auto found = events_.find({local, kind});
    if (found == events_.end()) return nullptr;
    const double now = seconds(clock_.now());
    const launcher::TraceEvent* best = nullptr;
    for (const auto* event : found->second) {
      if (event->t > now + 1e-9) break;
      best = event;
    }
    return best;
  }
  /// `local`'s counters at `now` (see sample()): those of the recorded sample nearest to now (one read later only
  /// within a second, and with no look at the stacks between: the stack tool's ptrace moves a rank's counters in a way
  /// the recorded watch never compared), else those of the one before, held; nullopt before any was recorded.
  std::optional<launcher::RankSample> interpolated(size_t local, double now) const {
    const auto found = events_.find({local, "sample"});
    if (found == events_.end()) return std::nullopt;
    const launcher::TraceEvent* before = nullptr;
    const launcher::TraceEvent* after = nullptr;
    for (const auto* event : found->second) {
      if (event->value.at("at").get<double>() <= now) {
        before = event;
      } else {
        after = event;
        break;
      }
    }
    const auto readAt = [](const launcher::TraceEvent* event) { return event->value.at("at").get<double>(); };
    const launcher::TraceEvent* chosen = before;
    if (after != nullptr && readAt(after) - now <= 1 &&
        (before == nullptr ||
         (readAt(after) - now < now - readAt(before) && !lookBetween(readAt(before), readAt(after))))) {
      chosen = after;
    }
    if (chosen == nullptr) return std::nullopt;
    launcher::RankSample sample;
    sample.localRank = local;
    sample.at = clock_.now();
    sample.counters = launcher::countersFromJson(chosen->value);
    const launcher::ActivityCounters& offset = offsets_.at(chosen);
    auto& c = sample.counters;
    c.cpuSeconds -= offset.cpuSeconds;
    c.rankCpuSeconds -= offset.rankCpuSeconds;
    c.mainThreadCpuSeconds -= offset.mainThreadCpuSeconds;
    c.computeDelaySeconds -= offset.computeDelaySeconds;
    c.mainThreadRuns -= std::min(c.mainThreadRuns, offset.mainThreadRuns);
    c.ioBytes -= std::min(c.ioBytes, offset.ioBytes);
    c.storageBytes -= std::min(c.storageBytes, offset.storageBytes);
    return sample;
  }
  /// What the stack tool's ptrace did to a rank's counters (runs, waits for a CPU) the recorded watch never compared
  /// (its first sample after a look starts afresh), and the replay, whose looks come at other moments, must not see
  /// either: each sample's counters less what grew across the recorded looks before it.
  void removeLooks() {
    for (auto& [key, samples] : events_) {
      if (key.second != "sample") continue;
      launcher::ActivityCounters offset;
      const launcher::TraceEvent* previous = nullptr;
      for (const auto* event : samples) {
        if (previous != nullptr &&
            lookBetween(previous->value.at("at").get<double>(), event->value.at("at").get<double>())) {
          const auto a = launcher::countersFromJson(previous->value);
          const auto b = launcher::countersFromJson(event->value);
          offset.cpuSeconds += b.cpuSeconds - a.cpuSeconds;
          offset.rankCpuSeconds += b.rankCpuSeconds - a.rankCpuSeconds;
          offset.mainThreadCpuSeconds += b.mainThreadCpuSeconds - a.mainThreadCpuSeconds;
          offset.computeDelaySeconds += b.computeDelaySeconds - a.computeDelaySeconds;
          offset.mainThreadRuns += b.mainThreadRuns - std::min(a.mainThreadRuns, b.mainThreadRuns);
          offset.ioBytes += b.ioBytes - std::min(a.ioBytes, b.ioBytes);
          offset.storageBytes += b.storageBytes - std::min(a.storageBytes, b.storageBytes);
        }
        offsets_[event] = offset;
        previous = event;
      }
    }
  }
  /// Whether a recorded look at the stacks went on between `from` and `to`.
  bool lookBetween(double from, double to) const {
    for (const auto* look : looks_) {
      if (look->value.at("asked").get<double>() < to && look->t > from) return true;
    }
    return false;
  }
  /// The last Python position a sample of `local` carried, at or before `now`.
  std::optional<launcher::PythonPosition> latestPython(size_t local, double now) const {
    const auto found = events_.find({local, "sample"});
    if (found == events_.end()) return std::nullopt;
    std::optional<launcher::PythonPosition> best;
    for (const auto* event : found->second) {
      if (event->t > now + 1e-9) break;
      if (event->value.contains("python")) best = launcher::pythonFromJson(event->value.at("python"));
    }
    return best;
  }

  const Clock& clock_;
  boost::asio::io_context& io_;
  Time start_;
  std::map<size_t, Rank> ranks_;
  std::map<std::pair<size_t, std::string>, std::vector<const launcher::TraceEvent*>> events_;
  std::vector<const launcher::TraceEvent*> looks_;
  std::map<const launcher::TraceEvent*, launcher::ActivityCounters> offsets_;  ///< see removeLooks()
  mutable std::vector<std::optional<launcher::WorkerExit>> exits_;
  std::vector<std::pair<double, std::function<void()>>> pending_;
};

/// Replays `trace` (its settings adjusted by `adjust`) through a WorkerWatch.
inline ReplayOutcome replayTrace(const launcher::Trace& trace,
                                 const std::function<void(launcher::TraceHeader&)>& adjust = {}) {
  launcher::TraceHeader header = trace.header;
  if (adjust) adjust(header);
  if (std::getenv("DDPRUN_REPLAY_DEBUG") != nullptr) spdlog::set_level(spdlog::level::debug);
  boost::asio::io_context io;
  FakeClock clock;
  const auto start = clock.now();
  TraceWorld world(trace, clock, io, start);
  ReplayOutcome outcome;
  launcher::WorkerWatch::Settings settings{header.hang, header.straggler, header.pythonWorkers, header.multiNode};
  launcher::WorkerWatch watch(
      io, clock, world, world, settings, [](const std::string&, const std::string&) { return true; },
      [&](std::vector<launcher::WorkerFailure> failures) {
        outcome.hangAt = std::chrono::duration<double>(clock.now() - start).count();
        for (const auto& failure : failures) {
          if (failure.waitsOnPeers) continue;
          outcome.culprits.push_back(failure.globalRank);
          outcome.hangMessage = failure.message;
        }
      });
  std::vector<launcher::WorkerWatch::RankFiles> files(world.size());
  watch.startAttempt(files);
  // The clock moves from tick to tick (--monitor-interval), and in between to each answer when it is due, as the
  // agent's loop runs the evidence's callbacks when they come, not on ticks.
  const auto seconds = [&] { return std::chrono::duration<double>(clock.now() - start).count(); };
  const auto moveTo = [&](double at) {
    const auto ms = static_cast<int64_t>(std::ceil((at - seconds()) * 1000 - 1e-6));
    if (ms > 0) clock.advance(std::chrono::milliseconds(ms));
  };
  // The recorded ticks, then one every --monitor-interval.
  size_t recordedTick = 0;
  const auto following = [&](double after) {
    while (recordedTick < world.ticks.size() && world.ticks[recordedTick] <= after + 1e-9) ++recordedTick;
    return recordedTick < world.ticks.size() ? world.ticks[recordedTick] : after + header.monitorInterval;
  };
  double nextTick = following(0);
  double t = 0;
  while (t < world.attemptEnd && !outcome.hangAt) {
    if (world.nextAnswer() < nextTick) {
      moveTo(world.nextAnswer());
      world.deliver();
    } else {
      moveTo(nextTick);
      nextTick = following(nextTick);
      watch.tick();
    }
    io.poll();
    io.restart();
    t = seconds();
    if (!outcome.spinAt && watch.counters().spins > 0) outcome.spinAt = t;
    if (!outcome.stragglerAt && watch.counters().stragglers > 0) outcome.stragglerAt = t;
  }
  outcome.end = t;
  return outcome;
}

}  // namespace ddprun::test
