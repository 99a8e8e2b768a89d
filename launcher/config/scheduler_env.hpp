#pragma once
// Defaults that a batch scheduler's environment gives ddprun's flags, so that the same command line works on
// every node of a job. Only Slurm is read here; Kubernetes (Kubeflow PyTorchJob) needs nothing of its own
// because its operator sets torchrun's PET_<FLAG> variables. Variable names: Slurm's srun/sbatch man pages
// ("OUTPUT ENVIRONMENT VARIABLES"); see docs/schedulers.md.
#include <functional>
#include <optional>
#include <string>

namespace ddprun::launcher {

/// Reads one environment variable; nullopt when unset. (ddprun::getEnv, or a map in tests.)
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

/// Flag defaults taken from a scheduler. Every field is unset when the scheduler does not say; the caller
/// applies a field only when the matching flag was not given.
struct SchedulerDefaults {
  std::optional<std::string> nnodes;            ///< --nnodes, a positive whole number ("2")
  std::optional<int> nodeRank;                  ///< --node-rank, 0 .. nnodes-1
  std::optional<std::string> rdzvEndpointHost;  ///< host part of --rdzv-endpoint (no port)
  std::optional<std::string> rdzvId;            ///< --rdzv-id
  std::string source;                           ///< "Slurm", or empty when no scheduler was found
};

/// The first host of a Slurm compressed host list: "gnode[10,20-25]" -> "gnode10", "a[001-004]" -> "a001"
/// (zero padding kept), "n1,n2" -> "n1", "rack[1-2]-n[3-4]" -> "rack1-n3", "host" -> "host".
/// The whole list is checked, not only its first entry. Throws ConfigError naming `variable` and the text
/// when the list is empty or malformed (unbalanced or nested brackets, an empty entry or range, a range
/// that is not digits or runs backwards, whitespace inside).
std::string firstHostOfNodelist(const std::string& nodelist, const std::string& variable = "SLURM_JOB_NODELIST");

/// Flag defaults from Slurm's environment, read through `getEnv` (an empty value counts as unset).
/// Under Slurm (SLURM_JOB_ID or SLURM_JOBID set): nnodes from SLURM_NNODES (else SLURM_JOB_NUM_NODES),
/// nodeRank from SLURM_NODEID, the endpoint host from the first host of SLURM_STEP_NODELIST (else
/// SLURM_JOB_NODELIST, else SLURM_NODELIST), rdzvId = the job id, source "Slurm". The step's list comes
/// first because SLURM_NNODES and SLURM_NODEID describe the srun step too: when a step runs on part of the
/// allocation, the job list's first host may run no ddprun at all. Not under Slurm: everything unset.
/// Throws ConfigError naming the variable for a value that is not a whole number, a node count below 1, a
/// node id outside 0..nnodes-1, or a malformed host list.
SchedulerDefaults slurmDefaults(const EnvLookup& getEnv);

/// Whether a signal sent by the process named `senderName` (/proc/<pid>/comm) reached ddprun's workers by itself.
/// True for Slurm's slurmstepd: `scancel --signal` and `sbatch --signal` make it signal every process of the job
/// step (its proctrack plugin walks the step's process tree or cgroup), so ddprun must not forward the signal a
/// second time; a worker whose handler has already run and reset could be ended by the copy.
bool signalReachedTheWholeStep(const std::string& senderName);

}  // namespace ddprun::launcher
