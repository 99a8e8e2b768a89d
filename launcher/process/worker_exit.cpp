#include "launcher/process/worker_exit.hpp"

#include <cstring>

namespace ddprun::launcher {

std::string signalName(int signal) {
  const char* abbrev = sigabbrev_np(signal);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(signal);
}

}  // namespace ddprun::launcher
