#pragma once
// Small facts about host names and addresses shared by the launcher and the worker.
#include <string>

namespace ddprun {

/// True for "localhost", any 127.0.0.0/8 address and "::1": a host that only this machine can reach.
inline bool isLoopbackHost(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

/// The address a server should bind so that clients told to connect to `host` reach it: a loopback
/// address itself ("::1" binds ::1, 127.0.0.5 binds 127.0.0.5; "localhost" 127.0.0.1), every IPv6
/// interface ("::") for another IPv6 address, every IPv4 interface otherwise.
inline std::string bindAddressFor(const std::string& host) {
  if (host == "localhost") return "127.0.0.1";
  if (isLoopbackHost(host)) return host;
  if (host.find(':') != std::string::npos) return "::";
  return "0.0.0.0";
}

}  // namespace ddprun
