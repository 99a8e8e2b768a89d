#include "launcher/terminal.hpp"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/error.hpp"

namespace ddprun::launcher {
namespace {

[[noreturn]] void fail(const std::string& what) { throw Error(what + ": " + std::strerror(errno)); }

}  // namespace

OutputChannel openPipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) fail("cannot create a pipe for a worker's output");
  return {fds[0], fds[1], false};
}

OutputChannel openPseudoTerminal(int sizeFrom) {
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master < 0) fail("cannot open a pseudo-terminal for a worker (posix_openpt)");
  char name[128];
  if (::grantpt(master) != 0 || ::unlockpt(master) != 0 || ::ptsname_r(master, name, sizeof name) != 0) {
    ::close(master);
    fail("cannot set up a pseudo-terminal for a worker");
  }
  const int slave = ::open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (slave < 0) {
    ::close(master);
    fail(std::string("cannot open ") + name);
  }
  termios mode{};
  if (::tcgetattr(slave, &mode) == 0) {
    mode.c_oflag &= ~static_cast<tcflag_t>(OPOST);  // the worker's bytes, unchanged
    mode.c_lflag &= ~static_cast<tcflag_t>(ECHO | ECHONL);
    ::tcsetattr(slave, TCSANOW, &mode);
  }
  copyWindowSize(sizeFrom, slave);
  return {master, slave, true};
}

void copyWindowSize(int from, int to) {
  winsize size{};
  if (from >= 0 && ::ioctl(from, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) ::ioctl(to, TIOCSWINSZ, &size);
}

bool isTerminal(int fd) { return ::isatty(fd) == 1; }

bool inForegroundOf(int fd) {
  const pid_t foreground = ::tcgetpgrp(fd);
  return foreground >= 0 && foreground == ::getpgrp();
}

}  // namespace ddprun::launcher
