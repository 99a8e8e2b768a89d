#include "launcher/worker_env.hpp"

#include "common/env.hpp"

namespace ddprun::launcher {

std::map<std::string, std::string> workerEnvironment(const LaunchConfig& config, const WorkerAssignment& worker,
                                                     const AttemptInfo& attempt, bool inheritedOmpThreads) {
  std::map<std::string, std::string> env{
      {"LOCAL_RANK", std::to_string(worker.localRank)},
      {"RANK", std::to_string(worker.globalRank)},
      {"GROUP_RANK", std::to_string(worker.groupRank)},
      {"ROLE_RANK", std::to_string(worker.roleRank)},
      {"ROLE_NAME", config.role},
      {"LOCAL_WORLD_SIZE", std::to_string(worker.localWorldSize)},
      {"WORLD_SIZE", std::to_string(worker.worldSize)},
      {"GROUP_WORLD_SIZE", std::to_string(worker.groupWorldSize)},
      {"ROLE_WORLD_SIZE", std::to_string(worker.roleWorldSize)},
      {"MASTER_ADDR", attempt.masterAddr},
      {"MASTER_PORT", std::to_string(attempt.masterPort)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(attempt.restartCount)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(config.maxRestarts)},
      {"TORCHELASTIC_RUN_ID", config.rdzvId},
      // Python's bool spelling, which torch/distributed/rendezvous.py compares against.
      {"TORCHELASTIC_USE_AGENT_STORE", attempt.useAgentStore ? "True" : "False"},
      {"TORCHELASTIC_ERROR_FILE", attempt.errorFile},
      {"NCCL_ASYNC_ERROR_HANDLING", getEnv("NCCL_ASYNC_ERROR_HANDLING").value_or("1")},
      {"TORCH_NCCL_ASYNC_ERROR_HANDLING", getEnv("TORCH_NCCL_ASYNC_ERROR_HANDLING").value_or("1")},
  };
  if (!inheritedOmpThreads && worker.localWorldSize > 1) env["OMP_NUM_THREADS"] = "1";
  return env;
}

std::vector<std::string> workerCommand(const LaunchConfig& config) {
  const bool isPythonFile = config.program.size() > 3 && config.program.compare(config.program.size() - 3, 3, ".py") == 0;
  std::vector<std::string> command;
  if (!config.noPython && (config.module || config.runPath || isPythonFile)) {
    command = {getEnv("DDPRUN_PYTHON").value_or("python3"), "-u"};
    if (config.module) command.push_back("-m");
  }
  command.push_back(config.program);
  command.insert(command.end(), config.programArgs.begin(), config.programArgs.end());
  return command;
}

}  // namespace ddprun::launcher
