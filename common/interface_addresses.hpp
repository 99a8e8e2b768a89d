#pragma once
// This machine's own addresses, for telling whether a host or a client is local.
#include <set>
#include <string>

namespace ddprun {

/// The addresses of this machine's network interfaces (getifaddrs), as inet_ntop writes them ("10.0.0.5",
/// "fe80::1"; no IPv6 scope). Empty when they cannot be listed.
std::set<std::string> interfaceAddresses();

}  // namespace ddprun
