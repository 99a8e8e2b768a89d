#pragma once
// The local worker group of one attempt (torch's PContext, torch/distributed/elastic/multiprocessing/
// api.py): starts one worker per local rank, signals and stops them all (SIGKILL after the stop timeout),
// keeps the orphan guard told of every live process group, and reports each exit on the agent's loop with
// the facts the policy needs (was it ddprun's own stop signal that ended it?). No decisions.
#include <sys/types.h>

#include <boost/asio.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "launcher/process/orphan_guard.hpp"
#include "launcher/process/worker_process.hpp"
#include "launcher/watch/watch_ports.hpp"
#include "launcher/worker_exit_event.hpp"

namespace ddprun::launcher {

class WorkerGroup : public WorkerGroupView {
 public:
  /// One worker to start.
  struct Member {
    WorkerLaunch launch;
    int localRank = 0;
    int globalRank = 0;
    std::string errorFile;  ///< its TORCHELASTIC_ERROR_FILE
  };
  /// Called on the loop for every exit; `allExited` for the last one of the attempt (by then whatever
  /// the workers left running in their process groups has been killed too). A failure in the attempt's first
  /// second is held back briefly (kStartupHold) while the other workers may still fail on their own: a missing
  /// script or a bad argument fails every rank, and each should be reported as failing, not as stopped by ddprun.
  using ExitCallback = std::function<void(const WorkerExitEvent&, bool allExited)>;
  static constexpr std::chrono::milliseconds kStartupWindow{1000};
  static constexpr std::chrono::milliseconds kStartupHold{200};
  /// A failed rank that wrote no error file: the end of its stderr, beside where that file would be.
  static constexpr const char* kStderrTailFile = "stderr_tail.txt";

  WorkerGroup(boost::asio::io_context& io, ChildReaper& reaper, std::chrono::duration<double> stopTimeout,
              ExitCallback onExit);
  /// Kills whatever still runs.
  ~WorkerGroup() override;
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  /// The guardian that kills every tracked group if ddprun dies (set once, before the first start).
  void setOrphanGuard(OrphanGuard* guard) { guard_ = guard; }

  /// Starts the next attempt's workers; the previous attempt's must all have exited. Throws ddprun::Error
  /// (the workers already started are killed).
  void start(std::vector<Member> members);
  /// Starts `member` in the place of local rank `local`, which has exited (--restart-scope rank); the others run
  /// on. The exited worker's process stays until the next start(), so its last output is still passed on. Call
  /// from a handler of its own (not from inside the exit callback). Throws ddprun::Error when it cannot start.
  void replace(size_t local, Member member);
  /// Sends `signal` to every worker's process group (exited workers' leftovers too), then SIGCONT, so that a
  /// stopped worker acts on it; SIGKILL to the ones still running after the stop timeout.
  void stop(int signal);
  /// SIGKILL to every worker still running, now.
  void kill();
  /// SIGKILL to local rank `local`'s process group alone, now, the others untouched (a hang's culprit, to be
  /// replaced): its exit counts as ddprun's doing.
  void kill(size_t local);
  /// Passes `signal` on to every running worker's process group, not as a stop (--signals-to-handle's SIGUSR1):
  /// a worker it ends has ended on its own.
  void signalAll(int signal);
  /// SIGABRT to the worker itself, its stderr appended to `fd` (owned) from now on: a Python worker
  /// started with PYTHONFAULTHANDLER=1 dumps every thread's traceback there and ends. The exit counts as
  /// ddprun's doing.
  void abortForTracebacks(size_t local, int fd) override;
  /// Ctrl-Z: SIGSTOP to every running worker's group (SIGTSTP would be dropped for a worker in a session of
  /// its own, an orphaned process group); resume() sends SIGCONT.
  void suspend();
  void resume();
  /// Passes a terminal's window size on to the workers' pseudo-terminals.
  void resize(int terminal);

  size_t size() const override { return slots_.size(); }
  bool allExited() const;
  /// True when every worker's stdout and stderr have ended (nothing left in their pipes).
  bool outputEnded() const;
  /// True when a worker's output (running or not) waits for the console to take what it holds.
  bool outputWaitsForConsole() const;
  /// Adds what the workers' output tells about their failures: a rank whose stderr said "Address already in use"
  /// while the agent serves the workers' store on MASTER_PORT is told about --no-agent-store (rank 0 of a script
  /// that hosts its own TCPStore there fails to bind it).
  void addOutputHints(std::vector<WorkerFailure>& failures, bool agentStore) const;
  pid_t pid(size_t local) const override;
  int globalRank(size_t local) const override { return slots_[local].member.globalRank; }
  const std::optional<WorkerExit>& exit(size_t local) const override { return slots_[local].exit; }
  /// True when `local` has exited and its end was ddprun's doing (a stop, a kill, an abort for stacks).
  bool stoppedByUs(size_t local) const { return slots_[local].exit && stoppedByUs(slots_[local], *slots_[local].exit); }
  /// True once the worker of `local` is reaped, also while its exit is still on its way to the policy.
  bool reaped(size_t local) const { return slots_[local].process && !slots_[local].process->running(); }
  /// True when the worker has exited and all it wrote to stderr has been passed on.
  bool finished(size_t local) const override { return slots_[local].exit && slots_[local].process->stderrEnded(); }
  /// When the worker last wrote output (steady clock; time_point{} when never).
  std::chrono::steady_clock::time_point lastOutput(size_t local) const override;
  bool outputHeld(size_t local) const override {
    return slots_[local].process && !slots_[local].exit && slots_[local].process->outputHeld();
  }
  /// At the end of a run whose console is stuck: every worker's output the console has not shown, prefixed.
  std::string takeUnshownOutput();

 private:
  struct Slot {
    Member member;
    std::unique_ptr<WorkerProcess> process;
    std::optional<WorkerExit> exit;
    bool exitedBeforeStop = false;  ///< already dead when ddprun's first signal went out
    std::set<int> signalsSent;      ///< what ddprun sent it: an exit by one of these is ddprun's doing
  };
  /// Sends `signal` to `slot`'s group (or the worker alone) and remembers that ddprun did.
  void send(Slot& slot, int signal, bool wholeGroup = true);

  void onExit(size_t local, const WorkerExit& exit);
  /// Passes the exits held back at start-up on, in order.
  void releaseHeld();
  /// Writes the end of a failed rank's stderr beside its error file (kStderrTailFile) and names it in `failure`.
  void saveStderrTail(const Slot& slot, WorkerFailure& failure) const;
  bool stoppedByUs(const Slot& slot, const WorkerExit& exit) const;
  void killLeftovers();
  void armKillTimer();

  boost::asio::io_context& io_;
  ChildReaper& reaper_;
  OrphanGuard* guard_ = nullptr;
  const std::chrono::duration<double> stopTimeout_;
  ExitCallback onExit_;
  boost::asio::steady_timer killTimer_;
  boost::asio::steady_timer holdTimer_;
  std::vector<WorkerExitEvent> held_;  ///< exits held back at start-up
  bool holding_ = false;
  std::chrono::steady_clock::time_point startedAt_{};
  std::vector<Slot> slots_;
  std::vector<std::unique_ptr<WorkerProcess>> replaced_;  ///< exited workers whose rank was replaced
  int stopSignal_ = 0;                                    ///< 0: not stopping
  bool signalled_ = false;   ///< ddprun has signalled this attempt's workers (send()); a kill(local) aside
  uint64_t generation_ = 0;  ///< counts attempts started
  std::chrono::system_clock::time_point firstSignalAt_;  ///< when ddprun first signalled this attempt
};

}  // namespace ddprun::launcher
