#include "launcher/process/orphan_guard.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
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

// The guardian is a clone(CLONE_VM) of ddprun: a process of its own (its own pid, file table, signal
// handlers) that shares ddprun's memory instead of copying it. A fork() cost each agent ~3 ms of CPU on
// start-up (copying the page tables, then a copy-on-write fault for every page ddprun wrote afterwards), which
// a thousand agents starting on one host pay in full. Sharing the memory puts rules on the guardian's code:
// it runs beside ddprun's threads on ddprun's heap and with its main thread's thread pointer, so it must not
// allocate, lock, or use anything thread-local. It touches only the region below (mapped for it alone and
// never unmapped) and calls plain system-call wrappers. Those write errno only on failure: while ddprun lives
// the guardian only read()s its pipe, which does not fail; its kill() and unlinkat() run after end-of-file,
// when ddprun is gone or waiting for the guardian in ~OrphanGuard. This file is compiled with -fno-plt: every
// library function it calls is bound when ddprun loads, so the dynamic linker's lazy binding (which takes locks and
// flags in the calling thread's control block) never runs in the guardian.

constexpr size_t kStackBytes = 256 * 1024;
constexpr size_t kMaxGroups = 64 * 1024;   ///< process groups tracked at once (one per running worker)
constexpr size_t kPruneBytes = 64 * 1024;  ///< the directories to prune, NUL-separated
constexpr size_t kLineBytes = 8 * 1024;    ///< one pipe message ("+pid", "-pid", "d<path>")
constexpr int kMaxPruneDepth = 24;         ///< a run's log tree is 3 levels deep

/// The guardian's memory, mapped by ddprun before the clone; pages are touched only when used.
struct GuardianState {
  int readEnd;
  int writeEnd;
  size_t groupCount;
  size_t pruneUsed;
  size_t lineUsed;
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
int guardianMain(void* arg) {
  auto& s = *static_cast<GuardianState*>(arg);
  ::close(s.writeEnd);
  // The handlers ddprun installed came along with the clone (a copy: CLONE_SIGHAND is not set), and they write to a
  // self-pipe the guardian shares with ddprun: a Ctrl-Z would reach ddprun twice (once from here). Back to defaults.
  // Only signals that exist are touched (1-31 and glibc's SIGRTMIN..SIGRTMAX, not its internal 32 and 33): a failing
  // call would write errno, which here is ddprun's main thread's.
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
      handleLine(s, s.line + start, i - start);
      start = i + 1;
    }
    if (start == 0 && s.lineUsed == kLineBytes) start = kLineBytes;  // a line longer than any message: dropped
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
  // One mapping for the guardian's state and, above it, its stack; never unmapped (the guardian may outlive
  // ddprun's exit by a moment, and it shares ddprun's address space).
  const size_t bytes = sizeof(GuardianState) + kStackBytes;
  void* memory = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (memory == MAP_FAILED) {
    const int error = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    throw Error(std::string("cannot map the orphan guard's memory: ") + std::strerror(error));
  }
  auto* state = static_cast<GuardianState*>(memory);
  state->readEnd = fds[0];
  state->writeEnd = fds[1];
  char* stackTop = static_cast<char*>(memory) + bytes;
  guardian_ = ::clone(guardianMain, stackTop, CLONE_VM | SIGCHLD, state);
  if (guardian_ < 0) {
    const int error = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    ::munmap(memory, bytes);
    throw Error(std::string("cannot start the orphan guard: ") + std::strerror(error));
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
