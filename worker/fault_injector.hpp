#pragma once
// Deliberate failures for elastic-restart tests (--fail-at-step/--fail-rank/--fail-attempt/--fail-mode), and a
// deliberately slow rank for straggler tests (--slow-rank/--slow-step-ms).
#include <cstdint>

#include "common/error.hpp"
#include "worker/options.hpp"

namespace ddprun::worker {

/// The error an injected "exit" failure throws; it ends up in the torchelastic error file.
class InjectedFault : public Error {
 public:
  using Error::Error;
};

class FaultInjector {
 public:
  /// Armed only when `rank` is options.failRank and `restartCount` (TORCHELASTIC_RESTART_COUNT)
  /// equals options.failAttempt, so a restarted group runs through.
  FaultInjector(const WorkerOptions& options, int rank, int restartCount);

  /// Called before global step `globalStep`: on the --slow-rank, sleeps --slow-step-ms (every step, every
  /// attempt); at the chosen failure step, throws InjectedFault (exit), raises SIGKILL on this process
  /// (kill), sleeps until a signal ends the process (hang), stops the process with SIGSTOP (stop), or throws from a
  /// background thread, which ends the process through std::terminate (thread).
  void beforeStep(int64_t globalStep) const;

  bool armed() const { return armed_; }

 private:
  bool armed_;
  int64_t step_;
  int rank_;
  int attempt_;
  FailMode mode_;
  double slowStepMs_;  ///< sleep per step on this rank; 0: not the slow rank
};

}  // namespace ddprun::worker
