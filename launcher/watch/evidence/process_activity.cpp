#include "launcher/watch/evidence/process_activity.hpp"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>
#include <vector>

namespace ddprun::launcher {
namespace {

namespace fs = std::filesystem;

/// At most this many processes of one tree are read (a fork bomb must not stall the agent's loop).
constexpr size_t kMaxProcesses = 256;

/// Reads a small /proc file (at most 4 KiB: stat, io, syscall and children fit). Non-blocking and without
/// following a link at the end, so a worker cannot make ddprun wait on something it controls.
std::string readSmall(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
  if (fd < 0) return "";
  char buffer[4096];
  const ssize_t n = ::read(fd, buffer, sizeof buffer);
  ::close(fd);
  return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : "";
}

uint64_t ioField(const std::string& io, const std::string& name) {
  const auto at = io.find(name + ": ");
  return at == std::string::npos ? 0 : std::strtoull(io.c_str() + at + name.size() + 2, nullptr, 10);
}

/// The pids listed in every thread's `children` file of `pid`.
std::vector<pid_t> childrenOf(const std::string& procRoot, pid_t pid) {
  std::vector<pid_t> children;
  std::error_code ec;
  for (fs::directory_iterator it(procRoot + "/" + std::to_string(pid) + "/task", ec), end; !ec && it != end;
       it.increment(ec)) {
    std::istringstream list(readSmall(it->path().string() + "/children"));
    pid_t child = 0;
    while (list >> child) children.push_back(child);
  }
  return children;
}

bool isDevNull(const std::string& procRoot, pid_t pid) {
  std::error_code ec;
  const auto target = fs::read_symlink(procRoot + "/" + std::to_string(pid) + "/fd/0", ec);
  return ec || target == "/dev/null";
}

}  // namespace

bool parseProcStat(const std::string& content, long ticksPerSecond, double& cpuSeconds, char& state) {
  // "pid (comm) S ppid …": comm may hold spaces and parentheses, so fields count from the last ')'.
  const auto close = content.rfind(')');
  if (close == std::string::npos || ticksPerSecond <= 0) return false;
  std::istringstream fields(content.substr(close + 1));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int index = 3; fields >> field; ++index) {
    if (index == 3) state = field.empty() ? '?' : field[0];
    if (index == 14) utime = std::strtoull(field.c_str(), nullptr, 10);
    if (index == 15) {
      stime = std::strtoull(field.c_str(), nullptr, 10);
      cpuSeconds = static_cast<double>(utime + stime) / static_cast<double>(ticksPerSecond);
      return true;
    }
  }
  return false;
}

bool parseSchedstat(const std::string& content, double& runSeconds, double& delaySeconds, uint64_t& runs) {
  unsigned long long run = 0, delay = 0, count = 0;
  if (std::sscanf(content.c_str(), "%llu %llu %llu", &run, &delay, &count) != 3) return false;
  runSeconds = static_cast<double>(run) * 1e-9;
  delaySeconds = static_cast<double>(delay) * 1e-9;
  runs = count;
  return true;
}

bool blockedOnStandardInput(const std::string& syscallContent) {
  std::istringstream fields(syscallContent);
  long number = -1;
  std::string first;
  if (!(fields >> number >> first)) return false;  // "running" or empty
  const unsigned long long arg0 = std::strtoull(first.c_str(), nullptr, 16);
  if (number == SYS_read) return arg0 == 0;
#ifdef SYS_select
  if (number == SYS_select) return arg0 == 1;
#endif
  if (number == SYS_pselect6) return arg0 == 1;
  return false;
}

namespace {

/// The rank's main thread: its state, and whether it waits for console input.
void readMainThread(pid_t pid, const std::string& procRoot, ActivityCounters& counters) {
  static const long ticks = ::sysconf(_SC_CLK_TCK);
  const std::string task = procRoot + "/" + std::to_string(pid) + "/task/" + std::to_string(pid);
  double cpu = 0;
  char state = '?';
  if (!parseProcStat(readSmall(task + "/stat"), ticks, cpu, state)) return;
  counters.mainThreadState = state;
  counters.mainThreadCpuSeconds = cpu;
  counters.waitsForInput =
      state == 'S' && blockedOnStandardInput(readSmall(task + "/syscall")) && !isDevNull(procRoot, pid);
  double run = 0, delay = 0;
  parseSchedstat(readSmall(task + "/schedstat"), run, delay, counters.mainThreadRuns);
}

/// Adds one process's counters; false when it is gone.
bool addProcess(pid_t pid, const std::string& procRoot, ActivityCounters& counters) {
  static const long ticks = ::sysconf(_SC_CLK_TCK);
  const std::string dir = procRoot + "/" + std::to_string(pid);
  double cpu = 0;
  char state = '?';
  if (!parseProcStat(readSmall(dir + "/stat"), ticks, cpu, state)) return false;
  counters.cpuSeconds += cpu;
  if (counters.processes == 0) counters.rankCpuSeconds = cpu;  // the rank itself is read first
  ++counters.processes;
  if (state == 'R') ++counters.runnable;
  double run = 0, delay = 0;
  uint64_t runs = 0;
  if (parseSchedstat(readSmall(dir + "/schedstat"), run, delay, runs) && runs > 0 &&
      run / static_cast<double>(runs) >= kComputeSliceSeconds) {
    counters.computeDelaySeconds += delay;
  }
  const std::string io = readSmall(dir + "/io");
  counters.ioBytes += ioField(io, "rchar") + ioField(io, "wchar");
  counters.storageBytes += ioField(io, "read_bytes") + ioField(io, "write_bytes");
  return true;
}

}  // namespace

ActivityCounters readProcessTree(pid_t pid, const std::string& procRoot, std::vector<pid_t>* members) {
  ActivityCounters counters;
  readMainThread(pid, procRoot, counters);
  if (counters.mainThreadState == '?') return counters;
  std::vector<pid_t> pending{pid};
  std::set<pid_t> seen;
  while (!pending.empty() && seen.size() < kMaxProcesses) {
    const pid_t next = pending.back();
    pending.pop_back();
    if (!seen.insert(next).second) continue;
    if (!addProcess(next, procRoot, counters)) continue;  // ended meanwhile
    if (members != nullptr) members->push_back(next);
    for (pid_t child : childrenOf(procRoot, next)) pending.push_back(child);
  }
  return counters;
}

ActivityCounters readProcesses(const std::vector<pid_t>& members, const std::string& procRoot) {
  ActivityCounters counters;
  if (members.empty()) return counters;
  readMainThread(members.front(), procRoot, counters);
  if (counters.mainThreadState == '?') return counters;
  for (pid_t pid : members) addProcess(pid, procRoot, counters);
  return counters;
}

ActivityCounters ProcessTreeSampler::sample(pid_t pid, std::chrono::steady_clock::time_point now, bool sockets,
                                            bool fresh) {
  if (trees_.size() > 4096) trees_.clear();  // ranks of attempts long gone
  Tree& tree = trees_[pid];
  ActivityCounters counters;
  if (fresh || tree.members.empty() || now - tree.found >= refresh_) {
    tree.members.clear();
    tree.sockets.clear();
    tree.socketsFound = false;
    tree.found = now;
    counters = readProcessTree(pid, procRoot_, &tree.members);
  } else {
    counters = readProcesses(tree.members, procRoot_);
  }
  if (!sockets) return counters;
  if (!tree.socketsFound) {
    for (pid_t member : tree.members) {
      const auto inodes = socketInodes(member, procRoot_);
      tree.sockets.insert(tree.sockets.end(), inodes.begin(), inodes.end());
    }
    // A DataLoader worker inherits its rank's descriptors: each socket counts once.
    std::sort(tree.sockets.begin(), tree.sockets.end());
    tree.sockets.erase(std::unique(tree.sockets.begin(), tree.sockets.end()), tree.sockets.end());
    tree.socketsFound = true;
  }
  counters.socketBytes = traffic_.bytes(tree.sockets, now);
  counters.socketsRead = true;
  return counters;
}

std::vector<pid_t> ProcessTreeSampler::members(pid_t pid) const {
  const auto it = trees_.find(pid);
  return it == trees_.end() ? std::vector<pid_t>{} : it->second.members;
}

}  // namespace ddprun::launcher
