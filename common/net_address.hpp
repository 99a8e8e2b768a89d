#pragma once
// Small facts about host names and addresses shared by the launcher and the worker.
#include <string>

namespace ddprun {

/// True for "localhost", any 127.0.0.0/8 address and "::1": a host that only this machine can reach.
inline bool isLoopbackHost(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

}  // namespace ddprun
