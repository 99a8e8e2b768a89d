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

uint64_t unhex(const json& value) { return std::stoull(value.get<std::string>(), nullptr, 16); }

uint64_t fnv1a(const std::string& text) {
  uint64_t hash = 14695981039346656037ULL;
  for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ULL;
  return hash;
}

constexpr const char* kPlaces[] = {"unknown", "collective", "gpu", "other", "exiting"};
constexpr const char* kStatuses[] = {"not_python", "unreadable", "moved", "read"};

template <size_t N>
size_t indexOf(const char* const (&names)[N], const std::string& name) {
  for (size_t i = 0; i < N; ++i) {
    if (name == names[i]) return i;
  }
  throw ConfigError("unknown value \"" + name + "\"");
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

TraceHeader headerFromJson(const json& j) {
  if (j.value("trace", "") != kTraceFormat || j.value("version", 0) != kTraceVersion) {
    throw ConfigError(std::string("not a ") + kTraceFormat + " version " + std::to_string(kTraceVersion));
  }
  TraceHeader h;
  h.startUnixMs = j.at("start_unix_ms").get<int64_t>();
  h.monitorInterval = j.at("monitor_interval").get<double>();
  const json& s = j.at("settings");
  const std::string mode = s.at("hang_timeout").get<std::string>();
  h.hang.mode = mode == "auto"  ? HangSettings::Mode::kAuto
                : mode == "off" ? HangSettings::Mode::kOff
                                : HangSettings::Mode::kFixed;
  h.hang.fixedSeconds = s.at("hang_fixed_seconds").get<double>();
  h.hang.minTimeoutSeconds = s.at("hang_min_timeout").get<double>();
  h.hang.safetyFactor = s.at("safety_factor").get<double>();
  h.hang.busyTimeoutSeconds = s.at("hang_busy_timeout").get<double>();
  h.hang.idleTimeoutSeconds = s.at("hang_idle_timeout").get<double>();
  h.hang.spinTimeoutSeconds = s.at("hang_spin_timeout").get<double>();
  h.hang.spinAction =
      s.at("hang_spin_action") == "restart" ? HangSettings::SpinAction::kRestart : HangSettings::SpinAction::kReport;
  if (!s.at("output_timeout").is_null()) h.hang.outputTimeoutSeconds = s.at("output_timeout").get<double>();
  h.straggler.factor = s.at("straggler_factor").get<double>();
  h.straggler.windowSeconds = s.at("straggler_window").get<double>();
  h.pythonWorkers = s.at("python_workers").get<bool>();
  h.multiNode = s.at("multi_node").get<bool>();
  return h;
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

ActivityCounters countersFromJson(const json& j) {
  ActivityCounters c;
  c.cpuSeconds = j.at("cpu").get<double>();
  c.rankCpuSeconds = j.at("rank_cpu").get<double>();
  c.mainThreadCpuSeconds = j.at("main_cpu").get<double>();
  c.socketBytes = j.at("sock").get<uint64_t>();
  c.socketsRead = j.at("sock_read").get<bool>();
  c.ioBytes = j.at("io").get<uint64_t>();
  c.storageBytes = j.at("storage").get<uint64_t>();
  c.processes = j.at("procs").get<int>();
  c.runnable = j.at("runnable").get<int>();
  const std::string state = j.at("state").get<std::string>();
  c.mainThreadState = state.empty() ? '?' : state[0];
  c.waitsForInput = j.at("input").get<bool>();
  c.computeDelaySeconds = j.at("delay").get<double>();
  c.mainThreadRuns = j.at("main_runs").get<uint64_t>();
  return c;
}

json toJson(const PythonPosition& p) {
  json frames = json::array();
  for (const PythonFrame& frame : p.frames) frames.push_back({frame.file, frame.function, frame.line});
  return {{"status", kStatuses[static_cast<size_t>(p.status)]},
          {"why", p.why},
          {"frames", p.frames.empty() ? json::array() : json::array({frames.front()})},
          {"depth", p.frames.size()},
          {"state", hex(p.state)},
          {"instr", hex(p.instruction)},
          {"jump", p.backwardJump}};
}

PythonPosition pythonFromJson(const json& j) {
  PythonPosition p;
  p.status = static_cast<PythonPosition::Status>(indexOf(kStatuses, j.at("status").get<std::string>()));
  p.why = j.at("why").get<std::string>();
  for (const json& frame : j.at("frames")) {
    p.frames.push_back({frame.at(0).get<std::string>(), frame.at(1).get<std::string>(), frame.at(2).get<int>()});
  }
  p.state = unhex(j.at("state"));
  p.instruction = unhex(j.at("instr"));
  p.backwardJump = j.at("jump").get<bool>();
  return p;
}

json toJson(const MainThread& t) {
  return {{"place", kPlaces[static_cast<size_t>(t.place)]},
          {"frame", t.frame},
          {"blocked", t.blockedIn},
          {"in_collective", t.inCollective},
          {"wait_spins", t.waitSpins},
          {"position", t.position.empty() ? "" : hex(fnv1a(t.position))},
          {"computes", t.computes},
          {"python", t.runsPython}};
}

MainThread threadFromJson(const json& j) {
  MainThread t;
  t.place = static_cast<MainThreadPlace>(indexOf(kPlaces, j.at("place").get<std::string>()));
  t.frame = j.at("frame").get<std::string>();
  t.blockedIn = j.at("blocked").get<std::string>();
  t.inCollective = j.at("in_collective").get<bool>();
  t.waitSpins = j.at("wait_spins").get<bool>();
  t.position = j.at("position").get<std::string>();
  t.computes = j.at("computes").get<bool>();
  t.runsPython = j.at("python").get<bool>();
  return t;
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

Trace readTrace(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError("cannot read the trace " + path);
  Trace trace;
  std::string line;
  for (size_t number = 1; std::getline(in, line); ++number) {
    try {
      const json j = json::parse(line);
      if (number == 1) {
        trace.header = headerFromJson(j);
        continue;
      }
      TraceEvent event;
      event.t = j.at("t").get<double>();
      event.rank = j.at("r").get<size_t>();
      for (const auto& [key, value] : j.items()) {
        if (key == "t" || key == "r") continue;
        event.kind = key;
        event.value = value;
      }
      trace.events.push_back(std::move(event));
    } catch (const std::exception& e) {
      throw ConfigError(path + ":" + std::to_string(number) + ": not a line of a watch trace: " + e.what());
    }
  }
  if (trace.events.empty() && trace.header.startUnixMs == 0) throw ConfigError(path + ": an empty trace");
  return trace;
}

}  // namespace ddprun::launcher
