#include "common/append_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/error.hpp"

namespace ddprun {
namespace {

namespace fs = std::filesystem;

/// Whether records may go to a file of this type: a regular file, or a character device (/dev/null, a terminal),
/// which takes writes at once. Not a FIFO, whose reader may never come or stop reading.
bool appendable(mode_t mode) { return S_ISREG(mode) || S_ISCHR(mode); }

/// What a file that is not appendable is, for a message.
std::string kindOf(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

/// Why following the symbolic link at `link` would be refused by fs.protected_symlinks' rule (fs/namei.c,
/// may_follow_link): it sits in a sticky world-writable directory and neither this user nor the directory's owner
/// owns it. "" when it may be followed. A sticky directory lets nobody else rename or remove the link, so the answer
/// holds until the open.
std::string linkRefusal(const fs::path& link, const struct stat& linkInfo) {
  if (linkInfo.st_uid == ::geteuid()) return "";
  struct stat dir {};
  const fs::path parent = link.has_parent_path() ? link.parent_path() : fs::path(".");
  if (::stat(parent.c_str(), &dir) != 0) return "";  // the open will say what is wrong
  constexpr mode_t kStickyWorldWritable = S_ISVTX | S_IWOTH;
  if ((dir.st_mode & kStickyWorldWritable) != kStickyWorldWritable || dir.st_uid == linkInfo.st_uid) return "";
  return link.string() + " is a symbolic link of uid " + std::to_string(linkInfo.st_uid) + " in " + parent.string() +
         ", a sticky world-writable directory: not followed (the rule of the kernel's fs.protected_symlinks)";
}

/// The first link on the way to `path` (each leading part, then `path` itself) that linkRefusal refuses; "" when none.
std::string refusedLinkOnTheWay(const fs::path& path) {
  fs::path prefix;
  for (const auto& part : path) {
    prefix /= part;
    struct stat info {};
    if (::lstat(prefix.c_str(), &info) != 0) return "";  // missing: nothing further to follow
    if (!S_ISLNK(info.st_mode)) continue;
    if (std::string refusal = linkRefusal(prefix, info); !refusal.empty()) return refusal;
  }
  return "";
}

}  // namespace

int openForAppend(const std::string& path) {
  const auto fail = [&](const std::string& why) { return IoError(path + ": cannot open it for appending: " + why); };
  if (std::string refusal = refusedLinkOnTheWay(path); !refusal.empty()) throw fail(refusal);
  constexpr int kFlags = O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
  int fd = ::open(path.c_str(), kFlags | O_NOFOLLOW, 0644);
  // A link at the end (ELOOP), allowed above: follow it, now that no one else can have put it there.
  if (fd < 0 && errno == ELOOP) fd = ::open(path.c_str(), kFlags, 0644);
  if (fd < 0) {
    const int error = errno;
    struct stat info {};
    // A FIFO with no reader answers ENXIO to a non-blocking open for writing.
    if (::stat(path.c_str(), &info) == 0 && !appendable(info.st_mode)) throw fail("it is " + kindOf(info.st_mode));
    throw fail(std::strerror(error));
  }
  struct stat info {};
  const bool typeOk = ::fstat(fd, &info) == 0 && appendable(info.st_mode);
  // A link that appeared on the way between the check and the open (a directory made after the check, say).
  const std::string lateRefusal = refusedLinkOnTheWay(path);
  if (!typeOk || !lateRefusal.empty()) {
    ::close(fd);
    throw fail(!lateRefusal.empty() ? lateRefusal : "it is " + kindOf(info.st_mode));
  }
  return fd;
}

}  // namespace ddprun
