#pragma once
// Bytes through a rank's TCP sockets, for the hang rule's "is a collective moving?": Gloo receives with recv(2) and
// NCCL's socket transport sends with sendmsg(2), which /proc/PID/io's rchar and wchar do not count, so a rank that
// only receives in a long broadcast would look still. The kernel keeps each TCP socket's byte counts in its tcp_info
// (tcpi_bytes_acked, tcpi_bytes_received: linux/tcp.h, Linux 4.1+), which one sock_diag dump (linux/inet_diag.h,
// what `ss -ti` reads) returns for every TCP socket of this network namespace, keyed by inode; a process's sockets are
// the "socket:[inode]" links in /proc/PID/fd.
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace ddprun::launcher {

/// The socket inodes among `pid`'s open descriptors (/proc/PID/fd links "socket:[N]"); empty when it is gone.
/// At most `limit` descriptors are looked at (a process with a million descriptors must not stall the caller).
std::vector<uint64_t> socketInodes(pid_t pid, const std::string& procRoot = "/proc", size_t limit = 4096);

/// Bytes sent (acknowledged by the peer) plus bytes received, by socket inode, of every TCP socket (IPv4 and IPv6)
/// in this network namespace, from one sock_diag dump. Never throws: empty when the kernel refuses (no netlink).
std::unordered_map<uint64_t, uint64_t> tcpBytesByInode();

/// One dump shared by every rank sampled within `maxAge` (one tick samples all quiet ranks; a dump per rank would
/// cost as many dumps).
class TcpTraffic {
 public:
  explicit TcpTraffic(std::chrono::milliseconds maxAge = std::chrono::milliseconds(100)) : maxAge_(maxAge) {}
  /// The bytes through `inodes` (a socket gone since counts as nothing) as of a dump at most maxAge old.
  uint64_t bytes(const std::vector<uint64_t>& inodes, std::chrono::steady_clock::time_point now);

 private:
  std::chrono::milliseconds maxAge_;
  std::chrono::steady_clock::time_point dumpedAt_{};
  std::unordered_map<uint64_t, uint64_t> byInode_;
};

}  // namespace ddprun::launcher
