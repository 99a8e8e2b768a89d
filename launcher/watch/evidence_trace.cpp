#include "launcher/watch/evidence_trace.hpp"

#include <spdlog/spdlog.h>

#include <cmath>
#include <cstdio>

#include "common/error.hpp"

namespace ddprun::launcher {
namespace {

using nlohmann::json;

std::string hex(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

uint64_t fnv1a(const std::string& text) {
  uint64_t hash = 14695981039346656037ULL;
  for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ULL;
  return hash;
}

const char* spinAction(HangSettings::SpinAction action) {
  return action == HangSettings::SpinAction::kRestart ? "restart" : "report";
}

}  // namespace

json toJson(const TraceHeader& h) {
  const char* mode = h.hang.mode == HangSettings::Mode::kAuto  ? "auto"
                     : h.hang.mode == HangSettings::Mode::kOff ? "off"
                                                               : "fixed";
  json settings{{"hang_timeout", mode},
                {"hang_fixed_seconds", h.hang.fixedSeconds},
                {"hang_min_timeout", h.hang.minTimeoutSeconds},
                {"safety_factor", h.hang.safetyFactor},
                {"hang_busy_timeout", h.hang.busyTimeoutSeconds},
                {"hang_idle_timeout", h.hang.idleTimeoutSeconds},
                {"hang_spin_timeout", h.hang.spinTimeoutSeconds},
                {"hang_spin_action", spinAction(h.hang.spinAction)},
                {"output_timeout", h.hang.outputTimeoutSeconds ? json(*h.hang.outputTimeoutSeconds) : json(nullptr)},
                {"straggler_factor", h.straggler.factor},
                {"straggler_window", h.straggler.windowSeconds},
                {"python_workers", h.pythonWorkers},
                {"multi_node", h.multiNode}};
  return {{"trace", kTraceFormat},
          {"version", kTraceVersion},
          {"start_unix_ms", h.startUnixMs},
          {"monitor_interval", h.monitorInterval},
          {"settings", settings}};
}

json toJson(const ActivityCounters& c) {
  return {{"cpu", c.cpuSeconds},
          {"rank_cpu", c.rankCpuSeconds},
          {"main_cpu", c.mainThreadCpuSeconds},
          {"sock", c.socketBytes},
          {"sock_read", c.socketsRead},
          {"io", c.ioBytes},
          {"storage", c.storageBytes},
          {"procs", c.processes},
          {"runnable", c.runnable},
          {"state", std::string(1, c.mainThreadState)},
          {"input", c.waitsForInput},
          {"delay", std::round(c.computeDelaySeconds * 1e6) / 1e6},
          {"main_runs", c.mainThreadRuns}};
}

json toJson(const PythonPosition& p) {
  json frames = json::array();
  for (const PythonFrame& frame : p.frames) frames.push_back({frame.file, frame.function, frame.line});
  return {{"status", kTraceStatuses[static_cast<size_t>(p.status)]},
          {"why", p.why},
          {"frames", p.frames.empty() ? json::array() : json::array({frames.front()})},
          {"depth", p.frames.size()},
          {"state", hex(p.state)},
          {"instr", hex(p.instruction)},
          {"jump", p.backwardJump}};
}

json toJson(const MainThread& t) {
  return {{"place", kTracePlaces[static_cast<size_t>(t.place)]},
          {"frame", t.frame},
          {"blocked", t.blockedIn},
          {"in_collective", t.inCollective},
          {"wait_spins", t.waitSpins},
          {"position", t.position.empty() ? "" : hex(fnv1a(t.position))},
          {"computes", t.computes},
          {"python", t.runsPython}};
}

EvidenceRecorder::EvidenceRecorder(const std::string& path, const Clock& clock, const TraceHeader& header,
                                   WorkerGroupView& group, EvidenceSource& evidence)
    : clock_(clock), group_(group), evidence_(evidence), start_(clock.now()), out_(path, std::ios::trunc) {
  if (!out_) throw ConfigError("--watch-record: cannot write " + path);
  out_ << toJson(header).dump() << '\n';
  spdlog::info("recording the watch's evidence in {} (docs/watching.md, \"Recording the evidence\")", path);
}

EvidenceRecorder::~EvidenceRecorder() { out_.flush(); }

double EvidenceRecorder::since(std::chrono::steady_clock::time_point time) const {
  return std::chrono::duration<double>(time - start_).count();
}

void EvidenceRecorder::write(size_t local, const char* kind, json value) const {
  auto& last = last_[{local, kind}];
  if (last && *last == value) return;
  last = value;
  if (written_ >= kMaxTraceBytes) return;
  const std::string line =
      json{{"t", std::round(since(clock_.now()) * 1e4) / 1e4}, {"r", local}, {kind, std::move(value)}}.dump();
  written_ += line.size() + 1;
  out_ << line << '\n';
  if (written_ >= kMaxTraceBytes)
    spdlog::warn("--watch-record: the trace reached {} MiB and stops here", kMaxTraceBytes >> 20);
  if (written_ % 64 == 0) out_.flush();
}

pid_t EvidenceRecorder::pid(size_t local) const {
  const pid_t pid = group_.pid(local);
  write(local, "rank", {{"pid", pid}, {"global", group_.globalRank(local)}});
  return pid;
}

const std::optional<WorkerExit>& EvidenceRecorder::exit(size_t local) const {
  pid(local);  // asked of every rank every tick: each rank's process is in the trace from its first tick
  const auto& exit = group_.exit(local);
  if (exit) write(local, "exit", {{"code", exit->exitCode}, {"signal", exit->signal}});
  return exit;
}

std::chrono::steady_clock::time_point EvidenceRecorder::lastOutput(size_t local) const {
  const auto time = group_.lastOutput(local);
  write(local, "output", time == std::chrono::steady_clock::time_point{} ? json(nullptr) : json(since(time)));
  return time;
}

bool EvidenceRecorder::outputHeld(size_t local) const {
  const bool held = group_.outputHeld(local);
  write(local, "held", held);
  return held;
}

std::optional<ProgressRecord> EvidenceRecorder::progress(size_t local, const std::string& file) {
  // The watch reads every rank's progress once a tick, rank 0 first: the tick's time, so that a replay ticks when the
  // recorded watch did.
  if (local == 0) {
    last_.erase({0, "tick"});
    write(0, "tick", nullptr);
  }
  auto record = evidence_.progress(local, file);
  json value = nullptr;
  if (record) {
    value = {{"step", record->step},
             {"samples", record->samples ? json(*record->samples) : json(nullptr)},
             {"phase", record->phase},
             {"busy", record->busySeconds ? json(*record->busySeconds) : json(nullptr)}};
  }
  write(local, "progress", std::move(value));
  return record;
}

void EvidenceRecorder::sample(std::vector<SampleTarget> targets, SamplesDone done) {
  evidence_.sample(std::move(targets), [this, done](std::vector<RankSample> samples) {
    for (const RankSample& s : samples) {
      json value = toJson(s.counters);
      value["at"] = std::round(since(s.at) * 1e4) / 1e4;
      if (s.python) value["python"] = toJson(*s.python);
      write(s.localRank, "sample", std::move(value));
    }
    done(std::move(samples));
  });
}

void EvidenceRecorder::collectStacks(std::vector<StackTarget> targets, std::chrono::milliseconds budget,
                                     StacksDone done) {
  const double asked = std::round(since(clock_.now()) * 1e4) / 1e4;
  evidence_.collectStacks(std::move(targets), budget, [this, asked, done](std::vector<RankStacks> stacks) {
    for (const RankStacks& s : stacks) {
      json value = toJson(s.thread);
      value["asked"] = asked;
      write(s.localRank, "stacks", std::move(value));
    }
    done(std::move(stacks));
  });
}

}  // namespace ddprun::launcher
