#include "launcher/config/local_host.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <unistd.h>

#include <set>

#include "common/interface_addresses.hpp"
#include "common/net_address.hpp"

namespace ddprun::launcher {
namespace {

std::string addressText(const sockaddr* address) {
  char text[INET6_ADDRSTRLEN] = {0};
  if (address->sa_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(address)->sin_addr, text, sizeof text);
  } else if (address->sa_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr, text, sizeof text);
  }
  return text;
}

std::set<std::string> resolve(const std::string& host) {
  std::set<std::string> addresses;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &result) != 0) return addresses;
  for (addrinfo* it = result; it != nullptr; it = it->ai_next) addresses.insert(addressText(it->ai_addr));
  ::freeaddrinfo(result);
  return addresses;
}

}  // namespace

std::string hostName() {
  char name[256] = {0};
  if (::gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

bool sameHost(const std::string& a, const std::string& b) {
  if (a == b) return true;
  const auto left = resolve(a);
  for (const auto& address : resolve(b)) {
    if (left.count(address)) return true;
  }
  return false;
}

bool isThisMachine(const std::string& host) {
  if (isLoopbackHost(host) || host == hostName()) return true;
  const auto mine = interfaceAddresses();
  for (const auto& address : resolve(host)) {
    if (isLoopbackHost(address) || mine.count(address)) return true;
  }
  return false;
}

}  // namespace ddprun::launcher
