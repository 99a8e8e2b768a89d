#pragma once
// Sockets that processes ddprun spawns must not inherit: Asio and Beast open them without FD_CLOEXEC, and a
// worker holding the store's listening socket would keep its port bound after ddprun is gone.
#include <fcntl.h>

namespace ddprun {

/// Marks `fd` close-on-exec.
inline void closeOnExec(int fd) { ::fcntl(fd, F_SETFD, ::fcntl(fd, F_GETFD) | FD_CLOEXEC); }

}  // namespace ddprun
