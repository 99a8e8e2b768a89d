#pragma once
// One worker process: started into a process group of its own (a session of its own when it reads ddprun's
// terminal) with PR_SET_PDEATHSIG, so it dies with ddprun even on SIGKILL; its stdout and stderr are relayed
// to the console with its prefix, to files, or both (torchrun's --redirects/--tee), through pipes or, when
// ddprun's console is a terminal, pseudo-terminals; its exit is reported through the Asio loop (SIGCHLD).
#include <sys/types.h>

#include <boost/asio.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launcher/process/console_writer.hpp"
#include "launcher/process/process_spawn.hpp"
#include "launcher/process/terminal.hpp"
#include "launcher/process/worker_exit.hpp"

namespace ddprun::launcher {

class ForkTemplate;
class SpareRank;
class OutputRelay;

/// Where a worker's output goes.
struct OutputSpec {
  std::string prefix;      ///< console line prefix, e.g. "[rank0]:"
  std::string stdoutFile;  ///< empty: no file
  std::string stderrFile;
  bool stdoutToConsole = true;
  bool stderrToConsole = true;
  /// A stream shown on the console and written to no file gets a pseudo-terminal when ddprun's own
  /// stream is a terminal (--no-tty: false).
  bool allowTerminal = true;
  /// --duplicate-stdout-filters / --duplicate-stderr-filters: lines containing any of these texts also go, with
  /// the prefix, to the attempt's filtered_stdout.log / filtered_stderr.log.
  std::vector<std::string> stdoutFilters, stderrFilters;
  std::string stdoutFilteredFile, stderrFilteredFile;
};

/// Everything needed to start one worker.
struct WorkerLaunch {
  std::vector<std::string> command;        ///< command[0] searched on PATH when it has no '/'
  std::map<std::string, std::string> env;  ///< set on top of ddprun's environment
  OutputSpec output;
  bool inheritStdin = false;           ///< ddprun's stdin (local rank 0), else /dev/null
  ConsoleWriter::Source source = 0;    ///< the global rank, for drop notices
  ForkTemplate* forkServer = nullptr;  ///< fork it from this template when it is ready (forkserver)
  /// Claim this waiting spare as the worker, when it has one (a rank replacement; not with a session of its own).
  SpareRank* spare = nullptr;
  std::vector<int> cpus;  ///< --numa-binding: its CPUs (empty: all)
  int memoryNode = -1;    ///< --numa-binding: the node its memory prefers (-1: none)
};

class WorkerProcess {
 public:
  using ExitCallback = std::function<void(const WorkerExit&)>;

  /// Starts the worker; `onExit` runs on `io`'s thread once it has exited. Throws ddprun::Error when the
  /// program cannot be started (naming exec's reason) or a log file cannot be created.
  WorkerProcess(boost::asio::io_context& io, ChildReaper& reaper, const WorkerLaunch& launch, ExitCallback onExit);
  /// Kills the worker's group if the worker still runs; stops relaying its output.
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  int pid() const { return pid_; }
  bool running() const { return !exited_; }
  /// Sends `signal` to the worker's whole process group (its children too), also after the worker itself
  /// has exited while others of its group live on.
  void signalGroup(int signal);
  /// True while any process of the worker's group is alive.
  bool groupAlive() const;
  /// True when the worker has exited but its exit callback has not run yet.
  bool exitPending() const;
  /// When the worker last wrote to stdout or stderr (steady clock; time_point{} when never).
  std::chrono::steady_clock::time_point lastOutput() const;
  /// True once everything the worker wrote to stderr has been passed on (the stream ended).
  bool stderrEnded() const;
  /// True once both streams have ended (everything the worker wrote has been passed on).
  bool outputEnded() const;
  /// Appends what the worker writes to stderr from now on to `fd` (owned).
  void copyStderrTo(int fd);
  /// True while ddprun does not read the worker's output because the console is full (it may wait in write).
  bool outputHeld() const;
  /// Its stderr said an address was in use (OutputRelay::sawAddressInUse).
  bool sawAddressInUse() const;
  /// Seconds ddprun has not read the worker's output because of the console, over the worker's life.
  double outputHeldSeconds() const;
  /// Everything the worker wrote that the console has not shown (its reader is stuck), prefixed; reading stops.
  std::string takeUnshownOutput();
  /// The end of what the worker wrote to stderr (StderrTail::text): its last traceback or lines.
  std::string stderrTail() const;
  /// Passes a terminal's new window size on to the worker's pseudo-terminals.
  void updateWindowSize(int fromTerminal);

 private:
  /// Claims `spare` when one waits, else forks the worker from `forkServer` when it is ready (its CPUs set from
  /// here: the memory policy cannot be), else spawns it.
  static pid_t start(const SpawnSpec& spec, ForkTemplate* forkServer, SpareRank* spare);
  std::shared_ptr<OutputRelay> relay(boost::asio::io_context& io, bool toConsole, const std::string& file,
                                     int consoleFd, const WorkerLaunch& launch, int& childFd);

  /// Calls `done` once the relay has read what the exited worker left in its stderr (its last traceback is often
  /// written just before it exits, and its exit may be seen first), looking again after each turn of the loop, at
  /// most kSettleTurns times (a relay that the console holds back does not read).
  void afterStderrRead(std::function<void()> done, int turn = 0);

  boost::asio::io_context& io_;
  ChildReaper& reaper_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  ///< for callbacks posted to the loop
  pid_t pid_ = -1;
  bool exited_ = false;         ///< reaped
  bool exitDelivered_ = false;  ///< its exit callback has run
  std::shared_ptr<OutputRelay> out_, err_;
  /// The terminal's mode before a worker that reads ddprun's terminal started, put back when it exits.
  std::optional<SavedTerminalMode> terminalMode_;
};

}  // namespace ddprun::launcher
