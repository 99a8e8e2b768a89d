#include "launcher/process/terminal.hpp"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
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

OutputChannel openPseudoTerminal(int sizeFrom, int narrowerBy) {
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
  copyWindowSize(sizeFrom, slave, narrowerBy);
  return {master, slave, true};
}

void copyWindowSize(int from, int to, int narrowerBy) {
  winsize size{};
  if (from < 0 || ::ioctl(from, TIOCGWINSZ, &size) != 0 || size.ws_col == 0) return;
  // Never narrower than a few columns: a prefix wider than the terminal still leaves the worker some room.
  const int columns = std::max(static_cast<int>(size.ws_col) - narrowerBy, std::min<int>(size.ws_col, 20));
  size.ws_col = static_cast<unsigned short>(columns);
  ::ioctl(to, TIOCSWINSZ, &size);
}

size_t visibleWidth(std::string_view text) {
  size_t width = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == 0x1b && i + 1 < text.size() && text[i + 1] == '[') {  // a colour: no width
      i += 2;
      while (i < text.size() && (static_cast<unsigned char>(text[i]) < 0x40 || text[i] > 0x7e)) ++i;
      continue;
    }
    if ((c & 0xc0) != 0x80) ++width;  // one per UTF-8 character, not per continuation byte
  }
  return width;
}

bool isTerminal(int fd) { return ::isatty(fd) == 1; }

bool inForegroundOf(int fd) {
  const pid_t foreground = ::tcgetpgrp(fd);
  return foreground >= 0 && foreground == ::getpgrp();
}

std::optional<SavedTerminalMode> SavedTerminalMode::of(int fd) {
  SavedTerminalMode saved;
  if (!isTerminal(fd) || ::tcgetattr(fd, &saved.mode_) != 0) return std::nullopt;
  saved.fd_ = fd;
  return saved;
}

void SavedTerminalMode::restore() const {
  termios now{};
  if (fd_ < 0 || !inForegroundOf(fd_) || ::tcgetattr(fd_, &now) != 0) return;
  if (std::memcmp(&now, &mode_, sizeof now) != 0) ::tcsetattr(fd_, TCSADRAIN, &mode_);
}

}  // namespace ddprun::launcher
