// Each worker's environment and command, as torchrun gives them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "common/error_file.hpp"
#include "launcher/config/launch_plan.hpp"
#include "launcher/worker_env.hpp"
#include "support/child_process.hpp"

namespace ddprun::launcher {
namespace fs = std::filesystem;
namespace {

TEST(WorkerEnv, GivesTorchrunsFullEnvironment) {
  WorkerSpec spec;
  spec.maxRestarts = 3;
  spec.runId = "job7";
  spec.role = "trainer";
  WorkerAssignment worker{1, 5, 5, 1, 2, 8, 4, 8};
  AttemptInfo attempt{2, "10.0.0.1", 29400, true, "/logs/attempt_2/1/error.json", "/logs/attempt_2/1/progress", {}};
  auto env = workerEnvironment(spec, worker, attempt);
  const std::map<std::string, std::string> expected{
      {"LOCAL_RANK", "1"},
      {"RANK", "5"},
      {"GROUP_RANK", "1"},
      {"ROLE_RANK", "5"},
      {"ROLE_NAME", "trainer"},
      {"LOCAL_WORLD_SIZE", "4"},
      {"WORLD_SIZE", "8"},
      {"GROUP_WORLD_SIZE", "2"},
      {"ROLE_WORLD_SIZE", "8"},
      {"MASTER_ADDR", "10.0.0.1"},
      {"MASTER_PORT", "29400"},
      {"TORCHELASTIC_RESTART_COUNT", "2"},
      {"TORCHELASTIC_MAX_RESTARTS", "3"},
      {"TORCHELASTIC_RUN_ID", "job7"},
      {"TORCHELASTIC_USE_AGENT_STORE", "True"},
      {"TORCHELASTIC_ERROR_FILE", "/logs/attempt_2/1/error.json"},
      {"OMP_NUM_THREADS", "1"},
      {"DDPRUN_PROGRESS_FILE", "/logs/attempt_2/1/progress"},
      // torch 1.13 reads the first (1: tear down on an NCCL error); torch 2.x the second (3: tear down after the
      // flight recorder has dumped).
      {"NCCL_ASYNC_ERROR_HANDLING", "1"},
      {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"}};
  for (const auto& [key, value] : expected) EXPECT_EQ(env[key], value) << key;
  EXPECT_EQ(env.count("TORCH_NCCL_DEBUG_INFO_PIPE_FILE"), 0u) << "no flight recorder files given";
  attempt.flightRecorder = flightRecorderFiles("/logs/attempt_2/1", 5, [](const char*) { return std::nullopt; });
  env = workerEnvironment(spec, worker, attempt);
  EXPECT_EQ(env["TORCH_FR_DUMP_TEMP_FILE"], "/logs/attempt_2/1/nccl_trace_rank_");
  EXPECT_EQ(env["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"], "/logs/attempt_2/1/nccl_dump_rank_");
  spec.inheritedOmpThreads = true;
  EXPECT_EQ(workerEnvironment(spec, worker, attempt).count("OMP_NUM_THREADS"), 0u);
  attempt.useAgentStore = false;
  EXPECT_EQ(workerEnvironment(spec, worker, attempt)["TORCHELASTIC_USE_AGENT_STORE"], "False");
}

TEST(WorkerEnv, RunsPythonEntryPointsUnbufferedAndBinariesDirectly) {
  LaunchPlan config;
  config.pythonInterpreter = "/usr/bin/python3";
  config.program = "train.py";
  config.programArgs = {"--lr", "0.1"};
  EXPECT_EQ(workerCommand(config), (std::vector<std::string>{"/usr/bin/python3", "-u", "train.py", "--lr", "0.1"}));
  config.module = true;
  config.program = "pkg.train";
  EXPECT_EQ(workerCommand(config),
            (std::vector<std::string>{"/usr/bin/python3", "-u", "-m", "pkg.train", "--lr", "0.1"}));
  config.module = false;
  config.pythonInterpreter.clear();
  config.program = "build/bin/worker";
  EXPECT_EQ(workerCommand(config), (std::vector<std::string>{"build/bin/worker", "--lr", "0.1"}));
}

}  // namespace
}  // namespace ddprun::launcher
