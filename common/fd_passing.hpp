#pragma once
// One message with descriptors over a Unix socket (SCM_RIGHTS): the forkserver protocol's transport.
#include <string>
#include <vector>

namespace ddprun {

/// Sends `text` as one message with `fds` attached; the number of bytes sent, or -1 (errno set).
long sendWithFds(int socket, const std::string& text, const std::vector<int>& fds);

/// Receives one message of at most `maxBytes` into `text`, and up to `maxFds` attached descriptors (received
/// CLOEXEC) into `fds`; the byte count, 0 at end of stream, or -1 (errno set). Retries after EINTR.
long receiveWithFds(int socket, std::string& text, std::vector<int>& fds, size_t maxBytes, size_t maxFds);

/// Whether `fd` is an open Unix SOCK_SEQPACKET socket: what ddprun hands a forkserver template or a spare. A marker
/// variable (DDPRUN_FORKSERVER_FD, DDPRUN_SPARE_RANK) that came with an inherited environment finds none.
bool isSeqPacketSocket(int fd);

}  // namespace ddprun
