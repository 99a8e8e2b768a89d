#include "store/local_client_uid.hpp"

#include <array>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/interface_addresses.hpp"

namespace ddprun::store {
namespace {

namespace ip = boost::asio::ip;

/// A v4-mapped IPv6 address as the IPv4 address it carries (a dual-stack listener sees IPv4 clients so).
ip::address plain(const ip::address& address) {
  if (address.is_v6() && address.to_v6().is_v4_mapped()) {
    return ip::make_address_v4(ip::v4_mapped, address.to_v6());
  }
  return address;
}

/// "0100007F:1F90" (IPv4) or 32 hex digits and a port (IPv6): each 32-bit word printed as the kernel holds it in
/// memory, so copying the parsed words back in this machine's byte order gives the address's bytes.
std::optional<ip::tcp::endpoint> parseEndpoint(const std::string& text) {
  const size_t colon = text.find(':');
  if (colon == std::string::npos || (colon != 8 && colon != 32)) return std::nullopt;
  try {
    const auto port = static_cast<unsigned short>(std::stoul(text.substr(colon + 1), nullptr, 16));
    std::array<unsigned char, 16> bytes{};
    for (size_t word = 0; word < colon / 8; ++word) {
      const auto value = static_cast<uint32_t>(std::stoul(text.substr(word * 8, 8), nullptr, 16));
      std::memcpy(bytes.data() + word * 4, &value, 4);
    }
    if (colon == 8) {
      return ip::tcp::endpoint(ip::address_v4(std::array<unsigned char, 4>{bytes[0], bytes[1], bytes[2], bytes[3]}),
                               port);
    }
    return ip::tcp::endpoint(plain(ip::address_v6(bytes)), port);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::string readAll(const char* path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::optional<SocketOwner> clientSocketIn(const std::string& table, const ip::tcp::endpoint& client,
                                          const ip::tcp::endpoint& server) {
  const ip::tcp::endpoint from(plain(client.address()), client.port()), to(plain(server.address()), server.port());
  std::istringstream lines(table);
  std::string line;
  std::getline(lines, line);  // the header
  while (std::getline(lines, line)) {
    // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid ...
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues, timer, retransmits;
    long long uid = -1, timeout = 0;
    unsigned long long inode = 0;
    if (!(fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode) ||
        uid < 0) {
      continue;
    }
    if (parseEndpoint(local) == from && parseEndpoint(remote) == to) {
      return SocketOwner{static_cast<uid_t>(uid), inode != 0};
    }
  }
  return std::nullopt;
}

std::optional<SocketOwner> localClientSocket(const ip::tcp::endpoint& client, const ip::tcp::endpoint& server) {
  for (const char* path : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    if (auto owner = clientSocketIn(readAll(path), client, server)) return owner;
  }
  return std::nullopt;
}

bool isThisHostsAddress(const ip::address& given) {
  const ip::address address = plain(given);
  if (address.is_loopback()) return true;
  // As interfaceAddresses() writes it: without an IPv6 scope.
  const std::string text =
      address.is_v6() ? ip::address_v6(address.to_v6().to_bytes()).to_string() : address.to_string();
  const auto mine = interfaceAddresses();
  return mine.empty() || mine.count(text) > 0;  // none listed (lo always is): cannot tell, so local, the stricter
}

}  // namespace ddprun::store
