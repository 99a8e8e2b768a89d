#include "common/untrusted_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

namespace ddprun {

std::optional<std::string> readUntrustedFile(const std::string& path, size_t maxBytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY);
  if (fd < 0) return std::nullopt;
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    return std::nullopt;
  }
  // Sized by the file, not the bound: a small file costs a small buffer.
  const size_t expected = info.st_size > 0 ? static_cast<size_t>(info.st_size) : 0;
  std::string text(std::min(maxBytes, expected + 1), '\0');
  size_t filled = 0;
  while (filled < maxBytes) {
    if (filled == text.size()) text.resize(std::min(maxBytes, 2 * text.size() + 4096));  // it grew since fstat
    const ssize_t n = ::read(fd, text.data() + filled, text.size() - filled);
    if (n <= 0) break;
    filled += static_cast<size_t>(n);
  }
  ::close(fd);
  text.resize(filled);
  return text;
}

}  // namespace ddprun
