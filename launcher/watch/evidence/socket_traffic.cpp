#include "launcher/watch/evidence/socket_traffic.hpp"

#include <dirent.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace ddprun::launcher {

std::vector<uint64_t> socketInodes(pid_t pid, const std::string& procRoot, size_t limit) {
  std::vector<uint64_t> inodes;
  const std::string dir = procRoot + "/" + std::to_string(pid) + "/fd";
  DIR* fds = ::opendir(dir.c_str());
  if (fds == nullptr) return inodes;
  char target[64];
  size_t looked = 0;
  while (const dirent* entry = ::readdir(fds)) {
    if (entry->d_name[0] == '.') continue;
    if (++looked > limit) break;
    const ssize_t n = ::readlinkat(::dirfd(fds), entry->d_name, target, sizeof target - 1);
    if (n <= 8 || std::strncmp(target, "socket:[", 8) != 0) continue;
    target[n] = '\0';
    inodes.push_back(std::strtoull(target + 8, nullptr, 10));
  }
  ::closedir(fds);
  return inodes;
}

namespace {

/// Sends one dump request for `family` and adds every answer to `out`; false when the kernel refused.
bool dumpFamily(int fd, uint8_t family, std::unordered_map<uint64_t, uint64_t>& out) {
  struct {
    nlmsghdr header;
    inet_diag_req_v2 request;
  } message{};
  message.header.nlmsg_len = sizeof message;
  message.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  message.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  message.header.nlmsg_seq = family;
  message.request.sdiag_family = family;
  message.request.sdiag_protocol = IPPROTO_TCP;
  message.request.idiag_ext = 1 << (INET_DIAG_INFO - 1);
  message.request.idiag_states = ~0u;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(fd, &message, sizeof message, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) < 0) return false;
  alignas(nlmsghdr) char buffer[32768];
  for (;;) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) return false;  // SO_RCVTIMEO passed, or an error: what was read so far stands
    auto length = static_cast<unsigned>(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buffer); NLMSG_OK(h, length); h = NLMSG_NEXT(h, length)) {
      if (h->nlmsg_type == NLMSG_DONE) return true;
      if (h->nlmsg_type == NLMSG_ERROR) return false;
      if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY) continue;
      const auto* socket = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
      int attributesLength = static_cast<int>(h->nlmsg_len - NLMSG_LENGTH(sizeof *socket));
      for (auto* a = reinterpret_cast<rtattr*>(const_cast<inet_diag_msg*>(socket) + 1); RTA_OK(a, attributesLength);
           a = RTA_NEXT(a, attributesLength)) {
        if (a->rta_type != INET_DIAG_INFO) continue;
        // An older kernel sends a shorter tcp_info: the byte counts are there only when the payload reaches them.
        constexpr size_t kEnd = offsetof(tcp_info, tcpi_bytes_received) + sizeof(uint64_t);
        if (RTA_PAYLOAD(a) < kEnd) continue;
        tcp_info info{};
        std::memcpy(&info, RTA_DATA(a), std::min<size_t>(RTA_PAYLOAD(a), sizeof info));
        out[socket->idiag_inode] += info.tcpi_bytes_acked + info.tcpi_bytes_received;
      }
    }
  }
}

}  // namespace

std::unordered_map<uint64_t, uint64_t> tcpBytesByInode() {
  std::unordered_map<uint64_t, uint64_t> bytes;
  const int fd = ::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (fd < 0) return bytes;
  // A dump never keeps the agent's loop waiting for long, whatever the kernel does.
  const timeval timeout{0, 100000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  dumpFamily(fd, AF_INET, bytes);
  dumpFamily(fd, AF_INET6, bytes);
  ::close(fd);
  bytes.erase(0);  // sockets without an inode (TIME_WAIT) belong to nobody
  return bytes;
}

uint64_t TcpTraffic::bytes(const std::vector<uint64_t>& inodes, std::chrono::steady_clock::time_point now) {
  if (inodes.empty()) return 0;
  if (dumpedAt_ == std::chrono::steady_clock::time_point{} || now - dumpedAt_ >= maxAge_) {
    byInode_ = tcpBytesByInode();
    dumpedAt_ = now;
  }
  uint64_t total = 0;
  for (uint64_t inode : inodes) {
    const auto it = byInode_.find(inode);
    if (it != byInode_.end()) total += it->second;
  }
  return total;
}

}  // namespace ddprun::launcher
