#include "launcher/process/orphan_guard.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/error.hpp"

namespace ddprun::launcher {
namespace {

// The guardian is forked as the first thing ddprun does (main.cpp), before option parsing, logging or threads have
// written to much memory. A fork's cost is in the pages: copying the page tables, then a copy-on-write fault (10-20 µs
// each on a busy VM) for every page that either process writes afterwards and that existed at the fork. Forked after
// start-up, it cost each agent about 5 ms of CPU, which a thousand agents starting on one host pay in full; at the
// start of main, few pages exist. The guardian itself allocates nothing: its state is one mapping of its own, made
// before the fork and not touched by ddprun, so it faults only fresh pages.
//
// Not clone(CLONE_VM), which would share ddprun's memory and copy nothing: the kernel kills every process that
// shares a memory with an OOM-killed process, and, before Linux 5.16, with one that dumps core. The guardian exists
// for exactly those deaths of ddprun.

constexpr size_t kMaxGroups = 64 * 1024;   ///< process groups tracked at once (one per running worker)
constexpr size_t kPruneBytes = 64 * 1024;  ///< the directories to prune, NUL-separated
constexpr size_t kLineBytes = 8 * 1024;    ///< one pipe message ("+pid", "-pid", "d<path>")
constexpr int kMaxPruneDepth = 24;         ///< a run's log tree is 3 levels deep

/// The guardian's memory, mapped before the fork and touched only by the guardian, page by page as it needs them.
struct GuardianState {
  int readEnd;
  size_t groupCount;
  size_t pruneUsed;
  size_t lineUsed;
  bool discarding;  ///< inside a line longer than any message: dropped up to its newline
  pid_t groups[kMaxGroups];
  char prune[kPruneBytes];
  char line[kLineBytes];
  char path[PATH_MAX];
};

long parsePid(const char* text, size_t length) {
  long value = 0;
  for (size_t i = 0; i < length; ++i) {
    if (text[i] < '0' || text[i] > '9') return -1;
    value = value * 10 + (text[i] - '0');
    if (value > 1L << 30) return -1;
  }
  return length == 0 ? -1 : value;
}

void handleLine(GuardianState& s, const char* line, size_t length) {
  if (length < 2) return;
  if (line[0] == 'd') {
    if (s.pruneUsed + length > kPruneBytes) return;  // only ever two paths per job; a flood is dropped
    std::memcpy(s.prune + s.pruneUsed, line + 1, length - 1);
    s.pruneUsed += length - 1;
    s.prune[s.pruneUsed++] = '\0';
    return;
  }
  const long group = parsePid(line + 1, length - 1);
  if (group <= 1) return;
  if (line[0] == '+') {
    for (size_t i = 0; i < s.groupCount; ++i)
      if (s.groups[i] == group) return;
    // More than kMaxGroups at once cannot happen (one per running worker); if it did, the newest entry is replaced.
    if (s.groupCount == kMaxGroups) s.groupCount = kMaxGroups - 1;
    s.groups[s.groupCount++] = static_cast<pid_t>(group);
  } else if (line[0] == '-') {
    for (size_t i = 0; i < s.groupCount; ++i) {
      if (s.groups[i] == group) {
        s.groups[i] = s.groups[--s.groupCount];
        return;
      }
    }
  }
}

/// Removes the empty directories under s.path (of length `length`) and then s.path itself if it is empty, without
/// following symbolic links or touching files; common/empty_dirs's pruneEmptyDirectories without allocating.
void pruneTree(GuardianState& s, size_t length, int depth) {
  if (depth > kMaxPruneDepth) return;
  const int dir = ::open(s.path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir < 0) return;
  alignas(8) char entries[2048];
  for (;;) {
    const ssize_t n = ::getdents64(dir, entries, sizeof entries);
    if (n <= 0) break;
    for (ssize_t offset = 0; offset < n;) {
      const auto* entry = reinterpret_cast<const struct dirent64*>(entries + offset);
      offset += entry->d_reclen;
      const char* name = entry->d_name;
      if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'))) continue;
      bool isDir = entry->d_type == DT_DIR;
      if (entry->d_type == DT_UNKNOWN) {
        struct stat st;
        isDir = ::fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
      }
      const size_t nameLength = std::strlen(name);
      if (!isDir || length + 1 + nameLength >= sizeof s.path) continue;
      s.path[length] = '/';
      std::memcpy(s.path + length + 1, name, nameLength + 1);
      pruneTree(s, length + 1 + nameLength, depth + 1);
      s.path[length] = '\0';
    }
  }
  ::close(dir);
  ::rmdir(s.path);  // fails, harmlessly, unless the directory is empty by now
}

/// The guardian's whole life: read the pipe, then kill and prune.
[[noreturn]] void guardianMain(GuardianState& s, int readEnd, int writeEnd) {
  ::close(writeEnd);
  s.readEnd = readEnd;
  // Handlers ddprun installed before (none when main.cpp forks it; a test may have some) write to a self-pipe the
  // guardian would share with ddprun: a Ctrl-Z would reach ddprun twice. Back to defaults, for the signals that
  // exist (1-31 and glibc's SIGRTMIN..SIGRTMAX, not its internal 32 and 33).
  for (int sig = 1; sig < 32; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::signal(sig, SIG_DFL);
  }
  for (int sig = SIGRTMIN; sig <= SIGRTMAX; ++sig) ::signal(sig, SIG_DFL);
  // Only EOF ends it. Every signal that would end or stop it is ignored, not only the stop signals: Slurm's
  // `scancel --signal=USR1` and `sbatch --signal` reach every process of the job step, the guardian included, and a
  // guardian ended by a warning would leave the workers unguarded. Faults (SIGSEGV and the like) keep their default.
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGPROF, SIGXCPU,
                  SIGXFSZ, SIGIO, SIGPWR, SIGSTKFLT, SIGTSTP, SIGTTIN, SIGTTOU}) {
    ::signal(sig, SIG_IGN);
  }
  for (int sig = SIGRTMIN; sig <= SIGRTMAX; ++sig) ::signal(sig, SIG_IGN);
  for (;;) {
    char* free = s.line + s.lineUsed;
    // Every signal that could interrupt it is ignored or fatal, so read() ends only at end-of-file.
    const ssize_t n = ::read(s.readEnd, free, kLineBytes - s.lineUsed);
    if (n <= 0) break;
    s.lineUsed += static_cast<size_t>(n);
    size_t start = 0;
    for (size_t i = 0; i < s.lineUsed; ++i) {
      if (s.line[i] != '\n') continue;
      if (!s.discarding) handleLine(s, s.line + start, i - start);
      s.discarding = false;
      start = i + 1;
    }
    if (start == 0 && s.lineUsed == kLineBytes) {  // no newline in a full buffer: longer than any message
      s.discarding = true;
      start = kLineBytes;
    }
    std::memmove(s.line, s.line + start, s.lineUsed - start);
    s.lineUsed -= start;
  }
  for (size_t i = 0; i < s.groupCount; ++i) ::kill(-s.groups[i], SIGKILL);
  for (size_t offset = 0; offset < s.pruneUsed;) {
    const size_t length = std::strlen(s.prune + offset);
    if (length < sizeof s.path) {
      std::memcpy(s.path, s.prune + offset, length + 1);
      while (length > 1 && s.path[length - 1] == '/') s.path[length - 1] = '\0';
      pruneTree(s, std::strlen(s.path), 0);
    }
    offset += length + 1;
  }
  ::_exit(0);
}

}  // namespace

OrphanGuard::OrphanGuard() {
  int fds[2];
  // O_CLOEXEC: a worker holding the write end would keep the guardian from ever seeing EOF.
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw Error(std::string("cannot create the orphan guard's pipe: ") + std::strerror(errno));
  // The guardian's state: mapped here, written only by the guardian (so its pages are fresh ones, not copies).
  void* memory = ::mmap(nullptr, sizeof(GuardianState), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) {
    const int error = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    throw Error(std::string("cannot map the orphan guard's memory: ") + std::strerror(error));
  }
  guardian_ = ::fork();
  if (guardian_ == 0) guardianMain(*static_cast<GuardianState*>(memory), fds[0], fds[1]);
  const int error = errno;
  ::munmap(memory, sizeof(GuardianState));
  if (guardian_ < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw Error(std::string("cannot fork the orphan guard: ") + std::strerror(error));
  }
  ::close(fds[0]);
  pipe_ = fds[1];
}

OrphanGuard::~OrphanGuard() {
  if (pipe_ >= 0) ::close(pipe_);
  if (guardian_ > 0) ::waitpid(guardian_, nullptr, 0);
}

void OrphanGuard::send(char op, const std::string& value) {
  const std::string line = op + value + "\n";
  // Short writes to a pipe are atomic; a guardian that died (EPIPE) cannot be helped here.
  [[maybe_unused]] ssize_t n = ::write(pipe_, line.data(), line.size());
}

void OrphanGuard::track(pid_t group) { send('+', std::to_string(group)); }
void OrphanGuard::untrack(pid_t group) { send('-', std::to_string(group)); }

void OrphanGuard::pruneOnExit(const std::string& dir) {
  if (dir.find('\n') == std::string::npos) send('d', dir);
}

}  // namespace ddprun::launcher
