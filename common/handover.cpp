#include "common/handover.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include <cstdlib>
#include <sstream>

#include "common/fd_passing.hpp"

namespace ddprun {

std::vector<std::string> Handover::environment(size_t skip) const {
  std::vector<std::string> env;
  for (size_t i = skip; i < lines.size(); ++i) {
    if (lines[i].find('=') != std::string::npos) env.push_back(lines[i]);
  }
  return env;
}

void Handover::closeFds() {
  for (int& fd : fds) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
}

long sendHandover(int socket, const std::string& head, const std::map<std::string, std::string>& env, int stdinFd,
                  int stdoutFd, int stderrFd) {
  std::string text = head;
  for (const auto& [key, value] : env) text += key + "=" + value + "\n";
  // The receiver needs a descriptor for each stream.
  const int devNull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  const long sent = sendWithFds(
      socket, text,
      {stdinFd >= 0 ? stdinFd : devNull, stdoutFd >= 0 ? stdoutFd : devNull, stderrFd >= 0 ? stderrFd : devNull});
  const int sendError = errno;
  if (devNull >= 0) ::close(devNull);
  errno = sendError;
  return sent == static_cast<long>(text.size()) ? sent : -1;
}

bool receiveHandover(int socket, Handover& message) {
  std::string text;
  std::vector<int> fds;
  if (receiveWithFds(socket, text, fds, 1 << 20, 3) <= 0) {
    for (int fd : fds) ::close(fd);
    return false;
  }
  for (size_t i = 0; i < fds.size(); ++i) {
    if (i < 3) {
      message.fds[i] = fds[i];
    } else {
      ::close(fds[i]);
    }
  }
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) message.lines.push_back(line);
  return true;
}

void applyHandover(Handover& message, const std::vector<std::string>& environment) {
  for (int target = 0; target < 3; ++target) {
    if (message.fds[target] == target) {
      message.fds[target] = -1;  // already in place (received into a closed standard stream's number)
    } else if (message.fds[target] >= 0) {
      ::dup2(message.fds[target], target);  // the copy has no FD_CLOEXEC
    }
  }
  message.closeFds();
  for (const std::string& entry : environment) {
    const auto eq = entry.find('=');
    ::setenv(entry.substr(0, eq).c_str(), entry.substr(eq + 1).c_str(), 1);
  }
}

}  // namespace ddprun
