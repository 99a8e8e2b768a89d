#include "common/interface_addresses.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

namespace ddprun {

std::set<std::string> interfaceAddresses() {
  std::set<std::string> addresses;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return addresses;
  for (const ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr) continue;
    char text[INET6_ADDRSTRLEN] = {0};
    if (it->ifa_addr->sa_family == AF_INET) {
      ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(it->ifa_addr)->sin_addr, text, sizeof text);
    } else if (it->ifa_addr->sa_family == AF_INET6) {
      ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(it->ifa_addr)->sin6_addr, text, sizeof text);
    }
    if (text[0] != '\0') addresses.insert(text);
  }
  ::freeifaddrs(list);
  return addresses;
}

}  // namespace ddprun
