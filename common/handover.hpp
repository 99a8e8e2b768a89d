#pragma once
// What ddprun hands a process that becomes a rank without an exec: its standard streams and its environment, as
// one message with three descriptors (SCM_RIGHTS) over a Unix SOCK_SEQPACKET socket. Used by the forkserver's
// fork request (common/forkserver.hpp) and the spare rank's claim (common/spare_rank.hpp). The text is lines:
// a verb ("fork", "claim"), then any lines the verb defines, then KEY=VALUE lines.
#include <map>
#include <string>
#include <vector>

namespace ddprun {

/// One received message: its lines and the descriptors for stdin, stdout and stderr (-1: none came).
struct Handover {
  std::vector<std::string> lines;  ///< every line, the verb first
  int fds[3] = {-1, -1, -1};

  /// The verb: the first line (empty when there is none).
  std::string verb() const { return lines.empty() ? std::string() : lines.front(); }
  /// The KEY=VALUE lines after the first `skip` lines.
  std::vector<std::string> environment(size_t skip) const;
  void closeFds();
};

/// Sends one message: `head` (the verb and any lines it defines, each ending in "\n"), then `env` as KEY=VALUE lines,
/// with the three streams attached (-1: /dev/null in its place). The number of bytes sent, or -1 (errno set).
long sendHandover(int socket, const std::string& head, const std::map<std::string, std::string>& env, int stdinFd,
                  int stdoutFd, int stderrFd);

/// Receives one message (at most 1 MiB, 3 descriptors; any more are closed). False at the end of the stream or
/// on an error.
bool receiveHandover(int socket, Handover& message);

/// Makes the message's descriptors this process's fds 0, 1 and 2 (without FD_CLOEXEC; a missing one leaves the
/// stream as it is), closes the received copies and sets each KEY=VALUE of `environment`.
void applyHandover(Handover& message, const std::vector<std::string>& environment);

}  // namespace ddprun
