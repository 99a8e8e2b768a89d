#pragma once
// What ddprun will do: the user's validated arguments (LaunchArgs) resolved once against this machine (the
// worker count after GPU detection, the Python that runs a script). Resolved here and nowhere else; after
// this nothing changes the plan, and components receive narrow settings made from it, never the whole plan.
#include <string>

#include "launcher/config/gpu_count.hpp"
#include "launcher/config/launch_config.hpp"

namespace ddprun::launcher {

/// The arguments and what was resolved from them. A LaunchPlan is a LaunchArgs (every flag reads the same)
/// plus the facts below.
struct LaunchPlan : LaunchArgs {
  int nproc = 1;                  ///< workers on this node (--nproc-per-node after GPU and CPU counting)
  std::string pythonInterpreter;  ///< the interpreter when the program runs under Python; "" otherwise
};

/// What resolution needs to know about this machine (counted only when --nproc-per-node asks for it).
struct MachineFacts {
  GpuCount gpus;  ///< visible GPUs and where the count came from
  int cpus = 1;   ///< online CPUs
};

/// Resolves --nproc-per-node as torchrun does (torch/distributed/run.py): a positive integer up to
/// kMaxNprocPerNode, "cpu" (the CPU count `cpuCount`), "gpu" (the GPU count, an error when 0), or "auto" (GPUs
/// if any, else CPUs). Throws ConfigError naming the value.
int resolveNprocPerNode(const std::string& value, int gpuCount, int cpuCount);

/// Resolves `args` into the plan: counts GPUs and CPUs when --nproc-per-node needs them, chooses the Python for a
/// script (python_entry.hpp), and says in one line each what it decided and what looks wrong (a torch-less
/// Python, a --local-ranks-filter that hides every rank). Throws ConfigError (exit 2) for what cannot work.
LaunchPlan resolveLaunchPlan(LaunchArgs args);

/// The same with the machine's facts given (for tests): no probing, no Python chosen.
LaunchPlan resolveLaunchPlan(LaunchArgs args, const MachineFacts& machine);

}  // namespace ddprun::launcher
