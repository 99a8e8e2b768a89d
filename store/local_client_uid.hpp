#pragma once
// Who owns a TCP client on this host: the uid column of Linux's /proc/net/tcp and /proc/net/tcp6 (the kernel's
// Documentation/networking/proc_net_tcp.rst), the way identd answers for local connections. TCP has no
// SO_PEERCRED; this is what the kernel tells a process about another user's socket.
#include <sys/types.h>

#include <boost/asio/ip/tcp.hpp>
#include <optional>
#include <string>

namespace ddprun::store {

/// The uid that owns the local socket connected from `client` to `server` (the addresses as the server's accepted
/// socket sees them). nullopt when no socket of this network namespace matches: the client is on another host, or
/// already gone. Reads both files each call (a few microseconds per hundred sockets).
std::optional<uid_t> localClientUid(const boost::asio::ip::tcp::endpoint& client,
                                    const boost::asio::ip::tcp::endpoint& server);

/// The same lookup in the text of one /proc/net/tcp{,6} file (for tests).
std::optional<uid_t> clientUidIn(const std::string& table, const boost::asio::ip::tcp::endpoint& client,
                                 const boost::asio::ip::tcp::endpoint& server);

}  // namespace ddprun::store
