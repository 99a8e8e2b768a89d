#include "launcher/worker_env.hpp"

#include "common/env.hpp"
#include "common/random_id.hpp"
#include "common/shm_names.hpp"

#include <cctype>
#include <sstream>

namespace ddprun::launcher {

WorkerSpec makeWorkerSpec(const LaunchPlan& config) {
  WorkerSpec spec;
  spec.command = workerCommand(config);
  spec.role = config.role;
  spec.maxRestarts = config.maxRestarts;
  spec.runId = config.rdzvId;
  spec.launchToken = randomHex(16);
  spec.virtualLocalRank = config.virtualLocalRank;
  spec.inheritedOmpThreads = getEnv("OMP_NUM_THREADS").has_value();
  spec.prefixTemplate = getEnv("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE").value_or(kDefaultLinePrefix);
  spec.allowTerminal = config.allowTerminal;
  spec.python = !config.pythonInterpreter.empty();
  spec.inheritedFaultHandler = getEnv("PYTHONFAULTHANDLER").has_value();
  return spec;
}

std::map<std::string, std::string> workerEnvironment(const WorkerSpec& spec, const WorkerAssignment& worker,
                                                     const AttemptInfo& attempt) {
  std::map<std::string, std::string> env{
      {"LOCAL_RANK", std::to_string(worker.localRank)},
      {"RANK", std::to_string(worker.globalRank)},
      {"GROUP_RANK", std::to_string(worker.groupRank)},
      {"ROLE_RANK", std::to_string(worker.roleRank)},
      {"ROLE_NAME", spec.role},
      {"LOCAL_WORLD_SIZE", std::to_string(worker.localWorldSize)},
      {"WORLD_SIZE", std::to_string(worker.worldSize)},
      {"GROUP_WORLD_SIZE", std::to_string(worker.groupWorldSize)},
      {"ROLE_WORLD_SIZE", std::to_string(worker.roleWorldSize)},
      {"MASTER_ADDR", attempt.masterAddr},
      {"MASTER_PORT", std::to_string(attempt.masterPort)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(attempt.restartCount)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(spec.maxRestarts)},
      {"TORCHELASTIC_RUN_ID", spec.runId},
      // Python's bool spelling, which torch/distributed/rendezvous.py compares against.
      {"TORCHELASTIC_USE_AGENT_STORE", attempt.useAgentStore ? "True" : "False"},
      {"TORCHELASTIC_ERROR_FILE", attempt.errorFile},
      {"DDPRUN_PROGRESS_FILE", attempt.progressFile},
      {kLaunchTokenEnv, spec.launchToken},
      // torch 1.13 reads only NCCL_ASYNC_ERROR_HANDLING, where 1 (tear the process down on an NCCL error) is the
      // only way not to hang. torch 2.x reads TORCH_NCCL_ASYNC_ERROR_HANDLING first: with 1 its watchdog aborts
      // before the flight recorder dump is written; 3 (tear down without cleaning up the communicators, torch
      // 2.x's own default and torchtitan's choice) still ends the process, after the dump.
      {"NCCL_ASYNC_ERROR_HANDLING", getEnv("NCCL_ASYNC_ERROR_HANDLING").value_or("1")},
      {"TORCH_NCCL_ASYNC_ERROR_HANDLING", getEnv("TORCH_NCCL_ASYNC_ERROR_HANDLING").value_or("3")},
  };
  if (!attempt.flightRecorder.pipePrefix.empty()) {
    env.merge(flightRecorderEnvironment(attempt.flightRecorder, [](const char* name) { return getEnv(name); }));
  }
  if (!spec.inheritedOmpThreads && worker.localWorldSize > 1) env["OMP_NUM_THREADS"] = "1";
  if (spec.virtualLocalRank) {
    // torchrun 2.x's --virtual-local-rank: every worker sees its own GPU, and only it, as device 0.
    env["LOCAL_RANK"] = "0";
    const auto visible = getEnv("CUDA_VISIBLE_DEVICES");
    std::vector<std::string> devices;
    std::stringstream items(visible.value_or(""));
    for (std::string item; std::getline(items, item, ',');) {
      if (!item.empty()) devices.push_back(item);
    }
    if (!devices.empty()) {
      env["CUDA_VISIBLE_DEVICES"] = devices[static_cast<size_t>(worker.localRank) % devices.size()];
    } else if (!visible) {
      env["CUDA_VISIBLE_DEVICES"] = std::to_string(worker.localRank);
    }
  }
  // Every thread's traceback on SIGABRT (a hang's stacks) and on a segfault (no bare "exitcode -11").
  if (spec.python && !spec.inheritedFaultHandler) env["PYTHONFAULTHANDLER"] = "1";
  return env;
}

std::map<std::string, std::string> templateEnvironment(const WorkerSpec& spec, int localWorldSize) {
  std::map<std::string, std::string> env{{"ROLE_NAME", spec.role},
                                         {"LOCAL_WORLD_SIZE", std::to_string(localWorldSize)},
                                         {"TORCHELASTIC_MAX_RESTARTS", std::to_string(spec.maxRestarts)},
                                         {"TORCHELASTIC_RUN_ID", spec.runId}};
  if (!spec.inheritedOmpThreads && localWorldSize > 1) env["OMP_NUM_THREADS"] = "1";
  return env;
}

std::vector<std::string> workerCommand(const LaunchPlan& config) {
  std::vector<std::string> command;
  if (!config.pythonInterpreter.empty()) {
    command = {config.pythonInterpreter, "-u"};  // unbuffered, as torchrun runs its entry points
    if (config.module) command.push_back("-m");
  }
  command.push_back(config.program);
  command.insert(command.end(), config.programArgs.begin(), config.programArgs.end());
  return command;
}

std::string linePrefix(const std::string& templ, const std::string& role, int rank, int localRank) {
  const std::map<std::string, std::string> values{
      {"role_name", role}, {"rank", std::to_string(rank)}, {"local_rank", std::to_string(localRank)}};
  std::string out;
  for (size_t i = 0; i < templ.size(); ++i) {
    if (templ[i] != '$' || i + 1 == templ.size()) {
      out += templ[i];
      continue;
    }
    if (templ[i + 1] == '$') {
      out += '$';
      ++i;
      continue;
    }
    const bool braced = templ[i + 1] == '{';
    size_t start = i + (braced ? 2 : 1), end = start;
    while (end < templ.size() && (std::isalnum(static_cast<unsigned char>(templ[end])) || templ[end] == '_')) ++end;
    auto it = values.find(templ.substr(start, end - start));
    const bool closed = !braced || (end < templ.size() && templ[end] == '}');
    if (it == values.end() || !closed || end == start) {
      out += templ[i];  // left as written
      continue;
    }
    out += it->second;
    i = braced ? end : end - 1;
  }
  return out;
}

}  // namespace ddprun::launcher
