#pragma once
// A scheduler's warning signals (SIGUSR1, SIGUSR2: Slurm's `scancel --signal=USR1`, `sbatch --signal=USR1@90`)
// do not end the worker (their default action would, and cost the job a restart and the steps since its last
// checkpoint). The worker notes them and carries on; it already checkpoints every --checkpoint-every steps, and
// a checkpoint taken at the signal would need every rank to agree on the step (a collective), which a signal
// that reaches each rank at its own moment cannot give. Only an atomic flag is touched in signal context.
namespace ddprun::worker {

/// Installs the handler for SIGUSR1 and SIGUSR2. Call once, early in main.
void noteWarningSignals();

/// The warning signal received since the last call (SIGUSR1 or SIGUSR2), or 0: for one log line at a step's end.
int takeWarningSignal();

}  // namespace ddprun::worker
