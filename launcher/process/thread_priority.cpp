#include "launcher/process/thread_priority.hpp"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ddprun::launcher {
namespace {

id_t thisThread() { return static_cast<id_t>(::syscall(SYS_gettid)); }

/// The nice value of thread `who`, or nullopt where it cannot be read (getpriority returns -1 for both nice -1 and
/// an error; errno tells them apart).
std::optional<int> niceOf(id_t who) {
  errno = 0;
  const int nice = ::getpriority(PRIO_PROCESS, who);
  if (nice == -1 && errno != 0) return std::nullopt;
  return nice;
}

}  // namespace

std::optional<int> raiseThisThreadPriority(int wanted, std::string* why) {
  const id_t tid = thisThread();
  if (::setpriority(PRIO_PROCESS, tid, wanted) == 0) return wanted;
  const int error = errno;
  // RLIMIT_NICE n allows nice values down to 20 - n (n is at most 40 in effect): ask for that, where it is still a
  // raise (e.g. a ddprun started at nice 10 under a limit of 15 may go to 5).
  rlimit limit{};
  const auto current = niceOf(tid);
  if (::getrlimit(RLIMIT_NICE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    const int allowed = std::max(wanted, 20 - static_cast<int>(std::min<rlim_t>(limit.rlim_cur, 40)));
    if (current && allowed < *current && ::setpriority(PRIO_PROCESS, tid, allowed) == 0) return allowed;
  }
  if (why) *why = std::strerror(error);
  return std::nullopt;
}

void dropInheritedPriority() {
  const id_t tid = thisThread();
  const auto process = niceOf(static_cast<id_t>(::getpid()));
  const auto mine = niceOf(tid);
  if (process && mine && *mine < *process) ::setpriority(PRIO_PROCESS, tid, *process);
}

}  // namespace ddprun::launcher
