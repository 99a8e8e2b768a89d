#pragma once
// Who owns a TCP client on this host. TCP has no SO_PEERCRED; the kernel's socket diagnostics (NETLINK_SOCK_DIAG,
// linux/inet_diag.h, what `ss` uses) look one socket up by its addresses and ports in the kernel's connection hash
// and report its uid and inode, the way identd answers for local connections. One lookup costs a few microseconds
// however many sockets the host has; reading /proc/net/tcp{,6} instead (the kernel's
// Documentation/networking/proc_net_tcp.rst) walks the whole connection hash and every socket in it, tens of
// milliseconds on a busy host. A socket its process has closed (FIN_WAIT2, TIME_WAIT) is listed with uid 0 and
// inode 0: it belongs to nobody any more.
#include <sys/types.h>

#include <boost/asio/ip/tcp.hpp>
#include <cstdint>
#include <optional>
#include <string>

namespace ddprun::store {

/// The owner of a client's socket, as the kernel lists it.
struct SocketOwner {
  uid_t uid = 0;
  bool open = false;  ///< a process still holds it (inode != 0); false: closed, its uid means nothing
};

/// Asks the kernel who owns local TCP clients, through one netlink socket of its own (NETLINK_SOCK_DIAG), opened at
/// the first question and kept. Single-threaded: one per loop.
class ClientOwners {
 public:
  ClientOwners() = default;
  ~ClientOwners();
  ClientOwners(const ClientOwners&) = delete;
  ClientOwners& operator=(const ClientOwners&) = delete;

  /// The local socket connected from `client` to `server` (the addresses as the server's accepted socket sees them).
  /// nullopt when no socket of this network namespace matches: the client is on another host, or its socket is gone
  /// altogether (reset). One exact sock_diag lookup (about 4 us); only a kernel without sock_diag for TCP (no
  /// inet_diag) has the tables read instead.
  std::optional<SocketOwner> socketOf(const boost::asio::ip::tcp::endpoint& client,
                                      const boost::asio::ip::tcp::endpoint& server);

  /// For a store that takes writes from this host only from its own user (and root): "" when the client connected
  /// from `client` to `server` may write (it is on another host, where TCP names no user, or this process's
  /// effective uid or root owns its socket); otherwise the client as a refusal names it ("of uid 65534", "on this
  /// host that closed its socket first", "on this host whose socket is gone"). What it says cannot change for the
  /// connection once its socket is open and owned.
  std::string untrustedWriter(const boost::asio::ip::tcp::endpoint& client,
                              const boost::asio::ip::tcp::endpoint& server);

 private:
  enum class Answer { kFound, kNone, kCannotTell };
  /// One SOCK_DIAG_BY_FAMILY request for the TCP socket bound to `from` and connected to `to`.
  Answer ask(const boost::asio::ip::tcp::endpoint& from, const boost::asio::ip::tcp::endpoint& to, SocketOwner& owner);

  int fd_ = -1;
  uint32_t sequence_ = 0;
};

/// The same lookup in the text of one /proc/net/tcp{,6} file (the fallback; for tests).
std::optional<SocketOwner> clientSocketIn(const std::string& table, const boost::asio::ip::tcp::endpoint& client,
                                          const boost::asio::ip::tcp::endpoint& server);

/// Whether `address` is this host's: loopback, or an address of one of its interfaces (getifaddrs).
bool isThisHostsAddress(const boost::asio::ip::address& address);

}  // namespace ddprun::store
