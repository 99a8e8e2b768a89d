#pragma once
// Who owns a TCP client on this host: the uid and inode columns of Linux's /proc/net/tcp and /proc/net/tcp6 (the
// kernel's Documentation/networking/proc_net_tcp.rst), the way identd answers for local connections. TCP has no
// SO_PEERCRED; this is what the kernel tells a process about another user's socket. A socket its process has closed
// (FIN_WAIT2, TIME_WAIT) is listed with uid 0 and inode 0: it belongs to nobody any more.
#include <sys/types.h>

#include <boost/asio/ip/tcp.hpp>
#include <optional>
#include <string>

namespace ddprun::store {

/// The owner of a client's socket, as the kernel lists it.
struct SocketOwner {
  uid_t uid = 0;
  bool open = false;  ///< a process still holds it (inode != 0); false: closed, its uid means nothing
};

/// The local socket connected from `client` to `server` (the addresses as the server's accepted socket sees them).
/// nullopt when no socket of this network namespace matches: the client is on another host, or its socket is gone
/// altogether (reset). Reads both files each call (a few microseconds per hundred sockets).
std::optional<SocketOwner> localClientSocket(const boost::asio::ip::tcp::endpoint& client,
                                             const boost::asio::ip::tcp::endpoint& server);

/// The same lookup in the text of one /proc/net/tcp{,6} file (for tests).
std::optional<SocketOwner> clientSocketIn(const std::string& table, const boost::asio::ip::tcp::endpoint& client,
                                          const boost::asio::ip::tcp::endpoint& server);

/// Whether `address` is this host's: loopback, or an address of one of its interfaces (getifaddrs).
bool isThisHostsAddress(const boost::asio::ip::address& address);

}  // namespace ddprun::store
