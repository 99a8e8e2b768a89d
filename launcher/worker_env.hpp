#pragma once
// What each worker is given: torchrun's environment (PyTorch local_elastic_agent.py::_start_workers)
// and the command line for its entry point (run.py: `python -u [-m] script args` or the binary itself).
#include <map>
#include <string>
#include <vector>

#include "launcher/config/launch_plan.hpp"
#include "launcher/watch/evidence/flight_recorder.hpp"

namespace ddprun::launcher {

/// Where one worker sits in the worker group.
struct WorkerAssignment {
  int localRank = 0;
  int globalRank = 0;
  int roleRank = 0;
  int groupRank = 0;       ///< this node's rank
  int groupWorldSize = 1;  ///< nodes in this round
  int worldSize = 1;
  int localWorldSize = 1;
  int roleWorldSize = 1;
};

/// The per-attempt facts of one worker.
struct AttemptInfo {
  int restartCount = 0;  ///< TORCHELASTIC_RESTART_COUNT
  std::string masterAddr;
  int masterPort = 0;
  bool useAgentStore = true;
  std::string errorFile;     ///< this worker's TORCHELASTIC_ERROR_FILE
  std::string progressFile;  ///< this worker's DDPRUN_PROGRESS_FILE
  /// Where its NCCL flight recorder dumps and listens (watch/flight_recorder.hpp); the variables for it are set
  /// unless ddprun's own environment sets them.
  FlightRecorderFiles flightRecorder;
};

/// The blueprint every worker of the job shares (torch's WorkerSpec): what to run and the job-wide facts of its
/// environment.
struct WorkerSpec {
  std::vector<std::string> command;    ///< program and arguments (workerCommand)
  std::string role = "default";        ///< --role
  int maxRestarts = 0;                 ///< --max-restarts
  std::string runId;                   ///< --rdzv-id
  std::string launchToken;             ///< random, one per run of ddprun (DDPRUN_LAUNCH_TOKEN: shm segment names)
  bool virtualLocalRank = false;       ///< --virtual-local-rank
  bool inheritedOmpThreads = false;    ///< OMP_NUM_THREADS was set for ddprun itself
  std::string prefixTemplate;          ///< console prefix of worker lines (TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE)
  bool allowTerminal = true;           ///< pseudo-terminals when ddprun's console is one (not --no-tty)
  bool python = false;                 ///< runs under Python: PYTHONFAULTHANDLER=1 unless the user set it
  bool inheritedFaultHandler = false;  ///< PYTHONFAULTHANDLER was set for ddprun itself
};

/// The blueprint of `config`'s workers, with ddprun's environment read now.
WorkerSpec makeWorkerSpec(const LaunchPlan& config);

/// The variables ddprun sets for one worker (the rest of ddprun's environment is inherited).
/// OMP_NUM_THREADS=1 is added only when ddprun's own environment has none and there are several local workers.
std::map<std::string, std::string> workerEnvironment(const WorkerSpec& spec, const WorkerAssignment& worker,
                                                     const AttemptInfo& attempt);

/// What a forkserver template gets (common/forkserver.hpp): the job-wide part of the workers' environment
/// (run id, role, restarts, OMP_NUM_THREADS), none of one rank's.
std::map<std::string, std::string> templateEnvironment(const WorkerSpec& spec, int localWorldSize);

/// Program and arguments to execute: under `<config.pythonInterpreter> -u [-m]` when that is set (see
/// python_entry.hpp for who decides), else the program itself.
std::vector<std::string> workerCommand(const LaunchPlan& config);

/// ddprun's console prefix of worker lines when TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE is unset.
inline constexpr const char* kDefaultLinePrefix = "[rank${rank}]:";

/// Fills torchrun 2.x's prefix template (TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, Python string.Template
/// syntax: ${role_name} or $role_name, ${rank}, ${local_rank}, $$ for '$'); unknown names stay as written,
/// as with Template.safe_substitute.
std::string linePrefix(const std::string& templ, const std::string& role, int rank, int localRank);

}  // namespace ddprun::launcher
