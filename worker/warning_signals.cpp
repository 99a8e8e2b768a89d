#include "worker/warning_signals.hpp"

#include <signal.h>

#include <atomic>

namespace ddprun::worker {
namespace {

std::atomic<int> gWarning{0};  // lock-free on every platform LibTorch runs on: safe in a signal handler

void onWarning(int signal) { gWarning.store(signal, std::memory_order_relaxed); }

}  // namespace

void noteWarningSignals() {
  struct sigaction action {};
  action.sa_handler = onWarning;
  action.sa_flags = SA_RESTART;  // a blocking read or a collective's poll goes on as if nothing happened
  ::sigemptyset(&action.sa_mask);
  ::sigaction(SIGUSR1, &action, nullptr);
  ::sigaction(SIGUSR2, &action, nullptr);
}

int takeWarningSignal() { return gWarning.exchange(0, std::memory_order_relaxed); }

}  // namespace ddprun::worker
