#include "worker/fault_injector.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <stdexcept>
#include <string>
#include <thread>

namespace ddprun::worker {

FaultInjector::FaultInjector(const WorkerOptions& options, int rank, int restartCount)
    : armed_(options.failAtStep >= 0 && options.failRank == rank && options.failAttempt == restartCount),
      step_(options.failAtStep),
      rank_(rank),
      attempt_(restartCount),
      mode_(options.failMode),
      slowStepMs_(options.slowRank == rank ? options.slowStepMs : 0.0) {}

void FaultInjector::beforeStep(int64_t globalStep) const {
  if (slowStepMs_ > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(slowStepMs_));
  if (!armed_ || globalStep != step_) return;
  const std::string where = "step " + std::to_string(step_) + " on rank " + std::to_string(rank_) + " (attempt " +
                            std::to_string(attempt_) + ")";
  switch (mode_) {
    case FailMode::kExit: throw InjectedFault("injected failure at " + where);
    case FailMode::kKill:
      spdlog::warn("fault injection: SIGKILL at {}", where);
      spdlog::default_logger()->flush();
      ::raise(SIGKILL);
      break;
    case FailMode::kHang:
      spdlog::warn("fault injection: hanging at {}", where);
      spdlog::default_logger()->flush();
      for (;;) ::pause();  // only a signal ends this
    case FailMode::kStop:
      spdlog::warn("fault injection: SIGSTOP at {}", where);
      spdlog::default_logger()->flush();
      ::raise(SIGSTOP);  // frozen until a SIGCONT (ddprun sends one after its SIGTERM when it stops the group)
      for (;;) ::pause();
    case FailMode::kThread:
      // An exception escaping a thread, as ProcessGroupNCCL's watchdog rethrows a collective's error.
      std::thread([where] {
        throw std::runtime_error("injected failure at " + where + " on a background thread");
      }).join();
      break;  // not reached: std::terminate ends the process
  }
}

}  // namespace ddprun::worker
