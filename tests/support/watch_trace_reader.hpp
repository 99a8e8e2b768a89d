#pragma once
// Reads back what ddprun --watch-record writes (launcher/watch/evidence_trace.hpp; docs/watching.md, "Recording the
// evidence"): the header and one event a line. For the replay (watch_replay.hpp); a line that is not one of a trace is
// a ConfigError naming the file and the line.
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "launcher/watch/evidence_trace.hpp"

namespace ddprun::launcher {

using nlohmann::json;

/// One line of a trace after the header.
struct TraceEvent {
  double t = 0;      ///< seconds since the recording began
  size_t rank = 0;   ///< the local rank
  std::string kind;  ///< tick, rank, progress, exit, output, held, sample, stacks
  nlohmann::json value;
};

/// A whole trace.
struct Trace {
  TraceHeader header;
  std::vector<TraceEvent> events;  ///< in the order written
};

inline uint64_t unhex(const json& value) { return std::stoull(value.get<std::string>(), nullptr, 16); }

template <size_t N>
size_t indexOf(const char* const (&names)[N], const std::string& name) {
  for (size_t i = 0; i < N; ++i) {
    if (name == names[i]) return i;
  }
  throw ConfigError("unknown value \"" + name + "\"");
}

inline TraceHeader headerFromJson(const json& j) {
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

inline ActivityCounters countersFromJson(const json& j) {
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

inline PythonPosition pythonFromJson(const json& j) {
  PythonPosition p;
  p.status = static_cast<PythonPosition::Status>(indexOf(kTraceStatuses, j.at("status").get<std::string>()));
  p.why = j.at("why").get<std::string>();
  for (const json& frame : j.at("frames")) {
    p.frames.push_back({frame.at(0).get<std::string>(), frame.at(1).get<std::string>(), frame.at(2).get<int>()});
  }
  p.state = unhex(j.at("state"));
  p.instruction = unhex(j.at("instr"));
  p.backwardJump = j.at("jump").get<bool>();
  return p;
}

inline MainThread threadFromJson(const json& j) {
  MainThread t;
  t.place = static_cast<MainThreadPlace>(indexOf(kTracePlaces, j.at("place").get<std::string>()));
  t.frame = j.at("frame").get<std::string>();
  t.blockedIn = j.at("blocked").get<std::string>();
  t.inCollective = j.at("in_collective").get<bool>();
  t.waitSpins = j.at("wait_spins").get<bool>();
  t.position = j.at("position").get<std::string>();
  t.computes = j.at("computes").get<bool>();
  t.runsPython = j.at("python").get<bool>();
  return t;
}

inline Trace readTrace(const std::string& path) {
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
