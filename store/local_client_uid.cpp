#include "store/local_client_uid.hpp"

#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
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

/// `address` as inet_diag_sockid holds it: 4 bytes (AF_INET) or 16 (AF_INET6), in network byte order.
void copyAddress(const ip::address& address, bool v4, __be32* to) {
  if (v4) {
    const auto bytes = address.to_v4().to_bytes();
    std::memcpy(to, bytes.data(), bytes.size());
  } else {
    const auto bytes =
        address.is_v4() ? ip::make_address_v6(ip::v4_mapped, address.to_v4()).to_bytes() : address.to_v6().to_bytes();
    std::memcpy(to, bytes.data(), bytes.size());
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

ClientOwners::~ClientOwners() {
  if (fd_ >= 0) ::close(fd_);
}

ClientOwners::Answer ClientOwners::ask(const ip::tcp::endpoint& from, const ip::tcp::endpoint& to, SocketOwner& owner) {
  // linux/inet_diag.h; the kernel finds the socket in its connection hash (inet_diag_find_one_icsk) and queues its
  // one reply before sendto returns, so the recv never waits. ENOENT is also the answer of a kernel without
  // tcp_diag (the caller tells the two apart).
  if (fd_ < 0) fd_ = ::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (fd_ < 0) return Answer::kCannotTell;
  struct {
    nlmsghdr header;
    inet_diag_req_v2 request;
  } message{};
  const bool v4 = from.address().is_v4() && to.address().is_v4();
  message.header.nlmsg_len = sizeof message;
  message.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  message.header.nlmsg_flags = NLM_F_REQUEST;
  message.header.nlmsg_seq = ++sequence_;
  message.request.sdiag_family = v4 ? AF_INET : AF_INET6;
  message.request.sdiag_protocol = IPPROTO_TCP;
  message.request.idiag_states = ~0u;
  message.request.id.idiag_sport = htons(from.port());
  message.request.id.idiag_dport = htons(to.port());
  copyAddress(from.address(), v4, message.request.id.idiag_src);
  copyAddress(to.address(), v4, message.request.id.idiag_dst);
  message.request.id.idiag_cookie[0] = message.request.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(fd_, &message, sizeof message, 0, reinterpret_cast<const sockaddr*>(&kernel), sizeof kernel) !=
      static_cast<ssize_t>(sizeof message)) {
    return Answer::kCannotTell;
  }
  alignas(nlmsghdr) char reply[1024];
  for (;;) {  // a reply to an earlier question that was never read (its recv failed) is skipped
    const ssize_t got = ::recv(fd_, reply, sizeof reply, MSG_DONTWAIT);
    const auto* header = reinterpret_cast<const nlmsghdr*>(reply);
    if (got < 0 || !NLMSG_OK(header, static_cast<size_t>(got))) return Answer::kCannotTell;
    if (header->nlmsg_seq != sequence_) continue;
    if (header->nlmsg_type == NLMSG_ERROR) {
      const auto* error = static_cast<const nlmsgerr*>(NLMSG_DATA(header));
      return error->error == -ENOENT ? Answer::kNone : Answer::kCannotTell;
    }
    if (header->nlmsg_type != SOCK_DIAG_BY_FAMILY || header->nlmsg_len < NLMSG_LENGTH(sizeof(inet_diag_msg))) {
      return Answer::kCannotTell;
    }
    const auto* found = static_cast<const inet_diag_msg*>(NLMSG_DATA(header));
    owner = SocketOwner{static_cast<uid_t>(found->idiag_uid), found->idiag_inode != 0};
    return Answer::kFound;
  }
}

std::optional<SocketOwner> ClientOwners::socketOf(const ip::tcp::endpoint& client, const ip::tcp::endpoint& server) {
  const ip::tcp::endpoint from(plain(client.address()), client.port()), to(plain(server.address()), server.port());
  SocketOwner owner;
  switch (ask(from, to, owner)) {
    case Answer::kFound: return owner;
    case Answer::kNone:
      // Either there is no such socket, or the kernel has no tcp_diag: the server's own end of the connection
      // exists, so asking for it tells the two apart.
      if (ask(to, from, owner) == Answer::kFound) return std::nullopt;
      break;
    case Answer::kCannotTell: break;
  }
  for (const char* path : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    if (auto found = clientSocketIn(readAll(path), client, server)) return found;
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

std::string ClientOwners::untrustedWriter(const ip::tcp::endpoint& client, const ip::tcp::endpoint& server) {
  const auto owner = socketOf(client, server);
  if (!owner) {
    // No socket of this host: another host's client (TCP names no user there; its address stays another host's), or
    // a local one that reset its socket before its first write was served.
    return isThisHostsAddress(client.address()) ? "on this host whose socket is gone" : "";
  }
  // A socket its process closed is listed as root's: whoever held it is unknown now.
  if (!owner->open) return "on this host that closed its socket first";
  if (owner->uid != ::geteuid() && owner->uid != 0) return "of uid " + std::to_string(owner->uid);
  return "";
}

}  // namespace ddprun::store
