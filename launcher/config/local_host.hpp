#pragma once
// Facts about the machine ddprun runs on, for rendezvous: its name and whether an address is its own.
#include <string>

namespace ddprun::launcher {

/// gethostname(), or "localhost" when it fails.
std::string hostName();

/// True when `host` names this machine: a loopback address or name, this machine's host name, or an
/// address of one of its interfaces (getifaddrs), after resolving `host`. How torchrun infers is_host
/// (torch/distributed/elastic/rendezvous/utils.py::_matches_machine_hostname).
bool isThisMachine(const std::string& host);

/// True when `a` and `b` name the same host: equal text, or names that resolve to a common address
/// ("localhost" and "127.0.0.1").
bool sameHost(const std::string& a, const std::string& b);

}  // namespace ddprun::launcher
