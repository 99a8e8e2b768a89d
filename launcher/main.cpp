// ddprun: torchrun-compatible launcher. Parses the command line, resolves the worker count, and hands
// over to the agent; every error ends in one clear line and a conventional exit code.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <csignal>
#include <iostream>

#include "common/env.hpp"
#include "common/error.hpp"
#include "launcher/agent.hpp"
#include "launcher/gpu_count.hpp"
#include "launcher/launch_config.hpp"

int main(int argc, char** argv) {
  using namespace ddprun;
  using namespace ddprun::launcher;
  auto parsed = parseLaunchArgs(argc, argv);
  if (!parsed.config) return parsed.exitCode;
  LaunchConfig config = std::move(*parsed.config);
  // ddprun's own lines go to stderr, as torchrun's do: stdout carries the workers' output alone.
  spdlog::set_default_logger(spdlog::stderr_color_mt("ddprun"));
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [ddprun] [%^%l%$] %v");
  // A closed stdout (ddprun … | head) must not kill the supervisor; writes just fail.
  ::signal(SIGPIPE, SIG_IGN);
  if (auto level = getEnv("DDPRUN_LOG_LEVEL")) spdlog::set_level(spdlog::level::from_str(*level));
  try {
    // Counted only when asked for: nvidia-smi, the last source, takes a moment to start.
    const bool countGpus = config.nprocPerNode == "gpu" || config.nprocPerNode == "auto";
    const GpuCount gpus = countGpus ? detectGpus() : GpuCount{};
    config.nproc = resolveNprocPerNode(config.nprocPerNode, gpus.count,
                                       static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN)));
    if (countGpus) {
      spdlog::info("--nproc-per-node {}: {} GPU(s) visible (from {}), starting {} workers", config.nprocPerNode,
                   gpus.count, gpus.source, config.nproc);
    }
    if (!getEnv("OMP_NUM_THREADS") && config.nproc > 1) {
      spdlog::info("setting OMP_NUM_THREADS=1 for each worker to avoid overloading the machine; set it yourself "
                   "to tune");
    }
  } catch (const ConfigError& e) {
    std::cerr << "ddprun: " << e.what() << "\n";
    return 2;
  }
  try {
    Agent agent(std::move(config));
    return agent.run();
  } catch (const ConfigError& e) {
    // Found only once the agent runs (e.g. --local-addr that is no address of this machine): still a flag.
    spdlog::error("{}", e.what());
    return 2;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
}
