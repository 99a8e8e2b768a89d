#include "common/fd_passing.hpp"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace ddprun {

long sendWithFds(int socket, const std::string& text, const std::vector<int>& fds) {
  std::vector<char> control(CMSG_SPACE(fds.size() * sizeof(int)));
  iovec io{const_cast<char*>(text.data()), text.size()};
  msghdr message{};
  message.msg_iov = &io;
  message.msg_iovlen = 1;
  if (!fds.empty()) {
    message.msg_control = control.data();
    message.msg_controllen = control.size();
    cmsghdr* c = CMSG_FIRSTHDR(&message);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(fds.size() * sizeof(int));
    std::memcpy(CMSG_DATA(c), fds.data(), fds.size() * sizeof(int));
  }
  return ::sendmsg(socket, &message, MSG_NOSIGNAL);
}

long receiveWithFds(int socket, std::string& text, std::vector<int>& fds, size_t maxBytes, size_t maxFds) {
  text.assign(maxBytes, '\0');
  std::vector<char> control(CMSG_SPACE(maxFds * sizeof(int)));
  iovec io{text.data(), text.size()};
  msghdr message{};
  message.msg_iov = &io;
  message.msg_iovlen = 1;
  message.msg_control = control.data();
  message.msg_controllen = control.size();
  ssize_t n;
  do {
    n = ::recvmsg(socket, &message, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  fds.clear();
  for (cmsghdr* c = CMSG_FIRSTHDR(&message); c != nullptr; c = CMSG_NXTHDR(&message, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    const int* received = reinterpret_cast<const int*>(CMSG_DATA(c));
    fds.insert(fds.end(), received, received + count);
  }
  return n;
}

bool isSeqPacketSocket(int fd) {
  int type = 0;
  socklen_t length = sizeof type;
  if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &length) != 0 || type != SOCK_SEQPACKET) return false;
  sockaddr_storage address{};
  socklen_t size = sizeof address;
  return ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) == 0 && address.ss_family == AF_UNIX;
}

}  // namespace ddprun
