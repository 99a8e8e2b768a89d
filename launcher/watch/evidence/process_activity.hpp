#pragma once
// What a rank's processes are doing, read from /proc without stopping them (proc(5)): the CPU time of every
// thread of the rank and of every process it started (DataLoader workers, say), its main thread's apart from its
// other threads' (a collective's communication threads), the bytes they moved through read/write calls and through
// their TCP sockets (socket_traffic.hpp), the main thread's scheduler state and, when it is blocked in a system call,
// whether that call waits for console input, and from each process's schedstat (the kernel's run time, run-queue delay
// and number of runs of its main thread) whether it waited for a CPU while computing and whether the rank's main thread
// keeps waking up. The hang rule (hang_rule.hpp) uses it to tell a rank that works without
// stepping, or a collective that moves data, from one that is stuck.
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "launcher/watch/evidence/socket_traffic.hpp"

namespace ddprun::launcher {

/// Counters of one rank's process tree at one instant.
struct ActivityCounters {
  double cpuSeconds = 0;      ///< user + system time of every thread of every process in the tree (stat fields 14, 15)
  double rankCpuSeconds = 0;  ///< of them, the rank's own process (all its threads)
  double mainThreadCpuSeconds = 0;  ///< of them, the rank's main thread
  uint64_t socketBytes = 0;    ///< bytes sent and received through the tree's TCP sockets (ProcessTreeSampler only)
  bool socketsRead = false;    ///< socketBytes was read for this sample (only where a collective's traffic matters)
  uint64_t ioBytes = 0;        ///< rchar + wchar: bytes through read and write calls (files, pipes, sockets)
  uint64_t storageBytes = 0;   ///< read_bytes + write_bytes: bytes fetched from or sent to storage
  int processes = 0;           ///< processes in the tree; 0 when the rank is gone
  int runnable = 0;            ///< of them, those whose main thread runs or waits for a CPU (state R) now
  char mainThreadState = '?';  ///< the rank's main thread: R running, S sleeping, D uninterruptible (I/O), ...
  /// Seconds the main threads of the tree's computing processes waited for a CPU (schedstat's run delay, of those whose
  /// runs average kComputeSliceSeconds or more: a thread that computes, not one that wakes up for microseconds).
  double computeDelaySeconds = 0;
  /// How many times the rank's main thread has been given a CPU (schedstat's third field): a thread blocked in one call
  /// is not, one that sleep-polls is, once a poll.
  uint64_t mainThreadRuns = 0;
  /// The main thread is blocked reading its standard input (read on fd 0, or select/pselect on it alone, as
  /// pdb and input() do), and that input is not /dev/null: it waits for a person, not for its peers.
  bool waitsForInput = false;
};

/// A process whose main thread's runs last this long on average computes (a wake-up to check a timer or a socket takes
/// tens of microseconds; a computation runs for the scheduler's slice, milliseconds).
inline constexpr double kComputeSliceSeconds = 200e-6;

/// Parses /proc/PID/schedstat: seconds on a CPU, seconds waiting for one, and the number of runs; false when it does
/// not parse.
bool parseSchedstat(const std::string& content, double& runSeconds, double& delaySeconds, uint64_t& runs);

/// Reads `procRoot` (/proc, or a tree laid out like it in tests) for `pid` and every process below it (through
/// each thread's `children` file). Never throws: whatever cannot be read (a process that just ended) counts as
/// nothing. `members`, when given, receives the tree's pids.
ActivityCounters readProcessTree(pid_t pid, const std::string& procRoot = "/proc",
                                 std::vector<pid_t>* members = nullptr);

/// Reads the counters of `members` (pid first: the rank) without looking for new processes.
ActivityCounters readProcesses(const std::vector<pid_t>& members, const std::string& procRoot = "/proc");

/// Samples ranks' process trees cheaply: finding a tree's processes (every thread's `children` file, tens of them in a
/// Python rank) and their sockets (every descriptor's link) is most of the cost, so each tree's members and sockets
/// are looked for again only every `refresh`; in between only their counters are read. A process or a connection
/// started meanwhile counts from the next refresh.
class ProcessTreeSampler {
 public:
  explicit ProcessTreeSampler(std::string procRoot = "/proc",
                              std::chrono::milliseconds refresh = std::chrono::seconds(2))
      : procRoot_(std::move(procRoot)), refresh_(refresh) {}
  /// `sockets`: also the bytes through the tree's TCP sockets, which cost a dump of the kernel's TCP tables (about 2 ms
  /// per address family on dev, whatever the number of sockets): asked for only where a rank waits in a collective.
  /// `fresh`: look for the tree's processes now (a verdict may rest on this sample: a DataLoader worker started a
  /// moment ago must count).
  ActivityCounters sample(pid_t pid, std::chrono::steady_clock::time_point now, bool sockets = true,
                          bool fresh = false);
  /// The processes of `pid`'s tree as last found (the rank first); empty when it was never sampled.
  std::vector<pid_t> members(pid_t pid) const;

 private:
  struct Tree {
    std::vector<pid_t> members;
    std::vector<uint64_t> sockets;
    bool socketsFound = false;  ///< `sockets` looked for since the members were found
    std::chrono::steady_clock::time_point found{};
  };
  std::string procRoot_;
  std::chrono::milliseconds refresh_;
  std::map<pid_t, Tree> trees_;
  TcpTraffic traffic_;
};

/// Parses the content of /proc/PID/stat: utime + stime in seconds (`ticksPerSecond` from sysconf), and the
/// state letter; false when the content does not parse.
bool parseProcStat(const std::string& content, long ticksPerSecond, double& cpuSeconds, char& state);

/// Parses /proc/PID/syscall: true when the thread is blocked in read(0, …), or in select/pselect6 with one
/// descriptor (fd 0 is the only one that fits nfds 1).
bool blockedOnStandardInput(const std::string& syscallContent);

}  // namespace ddprun::launcher
