// ddprun: torchrun-compatible launcher. Parses the command line, resolves the worker count, and hands
// over to the agent; every error ends in one clear line and a conventional exit code.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>

#include "common/env.hpp"
#include "common/error.hpp"
#include "launcher/agent.hpp"
#include "launcher/process/console_writer.hpp"
#include "launcher/process/logging.hpp"
#include "launcher/process/orphan_guard.hpp"
#include "launcher/config/python_entry.hpp"
#include "launcher/config/gpu_count.hpp"
#include "launcher/config/launch_config.hpp"

namespace {

/// DDPRUN_LOG_LEVEL, else torchrun's LOGLEVEL (Python's names: DEBUG, INFO, WARNING, ERROR, CRITICAL).
void applyLogLevel() {
  using namespace ddprun;
  std::string variable = "DDPRUN_LOG_LEVEL";
  auto text = getEnv(variable);
  if (!text) {
    variable = "LOGLEVEL";
    text = getEnv(variable);
  }
  if (!text) return;
  if (auto level = launcher::parseLogLevel(*text)) {
    spdlog::set_level(*level);
  } else {
    spdlog::warn("{}={}: not a log level (debug, info, warning, error, critical); keeping info", variable, *text);
  }
}

/// Decides whether the program runs under Python, and which Python; warns in one line when that Python
/// cannot find torch (the first thing a torch script does is import it).
void resolvePythonEntry(ddprun::launcher::LaunchConfig& config) {
  using namespace ddprun::launcher;
  if (programKind(config.program, config.module, config.runPath, config.noPython) != ProgramKind::kPython) return;
  const PythonChoice python = choosePython();
  config.pythonInterpreter = python.interpreter;
  if (auto problem = torchProblem(python)) spdlog::warn("{}", *problem);
}

/// --local-ranks-filter naming no local rank of this node hides every worker's console output: say so once.
void warnIfNoRankPassesFilter(const ddprun::launcher::LaunchConfig& config) {
  const auto& filter = config.localRanksFilter;
  const bool anyShown =
      std::any_of(filter.begin(), filter.end(), [&](int rank) { return rank >= 0 && rank < config.nproc; });
  if (filter.empty() || anyShown) return;
  spdlog::warn("--local-ranks-filter: no local rank of this node (0..{}) is in it, so no worker output reaches the "
               "console",
               config.nproc - 1);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ddprun;
  using namespace ddprun::launcher;
  auto parsed = parseLaunchArgs(argc, argv);
  if (!parsed.config) return parsed.exitCode;
  LaunchConfig config = std::move(*parsed.config);
  // Forked while ddprun is still single-threaded (the console writers below are threads): the guardian
  // may allocate after the fork.
  OrphanGuard guard;
  // ddprun's own lines go to stderr, as torchrun's do: stdout carries the workers' output alone. Both are
  // written from threads of their own, so a reader that stops reading never holds up supervision.
  installConsoleLogger();
  // A closed stdout (ddprun … | head) must not kill the supervisor; writes just fail.
  ::signal(SIGPIPE, SIG_IGN);
  applyLogLevel();
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
    warnIfNoRankPassesFilter(config);
    resolvePythonEntry(config);
    if (config.startMethod == "fork") {
      spdlog::info("--start-method fork: as in torchrun it concerns Python function entry points; a program is "
                   "always started as a process of its own");
    }
    if (!getEnv("OMP_NUM_THREADS") && config.nproc > 1) {
      spdlog::info("setting OMP_NUM_THREADS=1 for each worker to avoid overloading the machine; set it yourself "
                   "to tune");
    }
  } catch (const ConfigError& e) {
    consoleErr().write(ConsoleWriter::kSelf, std::string("ddprun: ") + e.what() + "\n", false);
    flushConsoles(std::chrono::seconds(1));
    return 2;
  }
  int exitCode = 1;
  try {
    Agent agent(std::move(config), guard);
    exitCode = agent.run();
  } catch (const ConfigError& e) {
    // Found only once the agent runs (e.g. --local-addr that is no address of this machine): still a flag.
    spdlog::error("{}", e.what());
    exitCode = 2;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    exitCode = 1;
  }
  // What is still queued for the console gets a moment; a reader that never reads does not hold ddprun.
  flushConsoles(std::chrono::seconds(1));
  return exitCode;
}
