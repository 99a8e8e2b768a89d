#include "launcher/config/launch_plan.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "common/env.hpp"
#include "common/error.hpp"
#include "launcher/config/python_entry.hpp"

namespace ddprun::launcher {

namespace {

bool countsGpus(const LaunchArgs& args) { return args.nprocPerNode == "gpu" || args.nprocPerNode == "auto"; }

/// --local-ranks-filter naming no local rank of this node hides every worker's console output: say so once.
void warnIfNoRankPassesFilter(const LaunchPlan& plan) {
  const auto& filter = plan.localRanksFilter;
  const bool anyShown =
      std::any_of(filter.begin(), filter.end(), [&](int rank) { return rank >= 0 && rank < plan.nproc; });
  if (filter.empty() || anyShown) return;
  spdlog::warn(
      "--local-ranks-filter: no local rank of this node (0..{}) is in it, so no worker output reaches the "
      "console",
      plan.nproc - 1);
}

/// Decides whether the program runs under Python, and which Python; warns in one line when that Python
/// cannot find torch (the first thing a torch script does is import it).
void choosePythonEntry(LaunchPlan& plan) {
  if (programKind(plan.program, plan.module, plan.runPath, plan.noPython) != ProgramKind::kPython) return;
  const PythonChoice python = choosePython();
  plan.pythonInterpreter = python.interpreter;
  if (auto problem = torchProblem(python)) spdlog::warn("{}", *problem);
}

/// --virtual-local-rank gives local rank r the r-th entry of CUDA_VISIBLE_DEVICES: more ranks than entries would put
/// two ranks on one GPU, which torch 2.x refuses (local_elastic_agent.py: "local_rank N exceeds available GPUs in
/// CUDA_VISIBLE_DEVICES=…"), and so does ddprun, before anything starts.
void checkVirtualLocalRank(const LaunchPlan& plan) {
  if (!plan.virtualLocalRank) return;
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible == nullptr) return;  // unrestricted: rank r uses GPU r, as torch's
  const auto entries = static_cast<int>(std::count(visible, visible + std::strlen(visible), ',') + 1);
  if (plan.nproc > entries) {
    throw ConfigError("--virtual-local-rank: local rank " + std::to_string(entries) +
                      " exceeds the GPUs in CUDA_VISIBLE_DEVICES=" + visible + " (" + std::to_string(plan.nproc) +
                      " workers, one GPU each); list as many GPUs as --nproc-per-node, or run fewer workers");
  }
}

}  // namespace

int resolveNprocPerNode(const std::string& value, int gpuCount, int cpuCount) {
  if (value == "cpu") return cpuCount;
  if (value == "auto") return gpuCount > 0 ? gpuCount : cpuCount;
  if (value == "gpu") {
    if (gpuCount == 0) {
      throw ConfigError(
          "--nproc-per-node gpu: no GPU is visible (CUDA_VISIBLE_DEVICES, /proc/driver/nvidia/gpus, "
          "nvidia-smi -L)");
    }
    return gpuCount;
  }
  return static_cast<int>(parseIntIn(value, "--nproc-per-node", 1, kMaxNprocPerNode));
}

LaunchPlan resolveLaunchPlan(LaunchArgs args, const MachineFacts& machine) {
  LaunchPlan plan;
  static_cast<LaunchArgs&>(plan) = std::move(args);
  plan.nproc = resolveNprocPerNode(plan.nprocPerNode, machine.gpus.count, machine.cpus);
  if (!machine.gpus.warning.empty()) spdlog::warn("{}", machine.gpus.warning);
  if (countsGpus(plan)) {
    spdlog::info("--nproc-per-node {}: {} GPU(s) visible (from {}), starting {} workers", plan.nprocPerNode,
                 machine.gpus.count, machine.gpus.source, plan.nproc);
  }
  warnIfNoRankPassesFilter(plan);
  checkVirtualLocalRank(plan);
  if (plan.startMethod == StartMethod::kFork) {
    spdlog::info(
        "--start-method fork: as in torchrun it concerns Python function entry points; a program is "
        "always started as a process of its own");
  }
  if (!getEnv("OMP_NUM_THREADS") && plan.nproc > 1) {
    spdlog::info(
        "setting OMP_NUM_THREADS=1 for each worker to avoid overloading the machine; set it yourself "
        "to tune");
  }
  return plan;
}

LaunchPlan resolveLaunchPlan(LaunchArgs args) {
  MachineFacts machine;
  // Counted only when asked for: nvidia-smi, the last source, takes a moment to start.
  if (countsGpus(args)) machine.gpus = detectGpus();
  machine.cpus = static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  LaunchPlan plan = resolveLaunchPlan(std::move(args), machine);
  choosePythonEntry(plan);
  return plan;
}

}  // namespace ddprun::launcher
