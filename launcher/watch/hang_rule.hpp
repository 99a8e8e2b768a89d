#pragma once
// The hang rule: a job is hung only when nobody can move, and it is judged in seconds only on the distributed
// deadlock's signature: a rank waits in a collective and nothing moves. Pure: the watch gathers the evidence (progress,
// activity of each rank's process tree, where each main thread is) and asks; tests ask with recorded evidence.
//
// Once ranks have passed their progress timeout (the suspicion), every running rank is looked at:
// - a rank waiting for console input (pdb, input()) or stopped (kill -STOP, a debugger at a breakpoint) is a
//   person's doing, and one whose output ddprun does not read because its console is full waits for that console:
//   the job works;
// - a rank whose main thread is in its exit path (the interpreter's finalisation, exit handlers) is finishing: it
//   works, even where that path tears down a process group or waits in a last collective (a peer that ended first
//   is then no early exit), unless another running rank is idle outside collectives (that rank holds it up);
// - a rank whose main thread is in a collective works while the collective moves: bytes through its sockets or
//   read/write calls, or CPU of its threads other than the main one (Gloo's), or of its main thread where the
//   backend's wait does not spin (Gloo, ddprun's shared memory; NCCL's may); otherwise it waits for its peers;
// - a rank whose main thread waits for its GPU may be computing there: it counts as waiting only while another
//   rank is idle outside any collective (then that rank holds everyone up), else as working;
// - any other rank works if its processes used CPU, moved bytes or waited for a CPU while computing (a loaded
//   machine) within the timeout, as far as the samples saw (activity_monitor.hpp: what was not seen is not idle);
//   otherwise it is idle, and it holds the others up, unless its main thread keeps waking up (it polls: a wait loop
//   for a file or a queue, which waits for something outside the job and is judged by the idle timeout). One that has
//   used CPU alone (no bytes) with its main thread in the same place for the spin timeout while a peer waits in a
//   collective spins. A rank running Python is judged by its Python position instead of its native stacks (which
//   cannot tell `while not ready: pass` from a pure-Python computation): over that long, at least kMinSameReads reads
//   of its Python state (frames, lines, the innermost frame's bytecode, variables and their values), of which at
//   most a quarter found a state it had not been in before (a loop over a few states comes back to them; a
//   computation reaches new ones), over more than one bytecode or on one that jumps backwards (one long call, a sort
//   or a regular expression, stays on one other bytecode). A rank whose Python cannot be read is never a spin.
// The job works while any rank works. Otherwise, when some rank waits on its peers (in a collective, or for a GPU that
// waits in one), the ranks that hold it up are the idle ones outside collectives, the spinning ones and any rank that
// exited 0 early: with one that is neither spinning nor polling among them, the job is hung (the deadlock's
// signature); with only spinning ones, the spin is reported (kSpinning: no evidence tells a spin from a long
// computation with certainty), and hung only where the user asked for that (RuleSettings::spinIsHang); with only
// polling ones, it waits as an idle job does. With no such rank every rank waits in a collective: a deadlock on one
// node, but on several nodes the cause may be a rank elsewhere (whose own agent judges it), so a multi-node agent
// waits. When no rank waits on a peer (every rank sleeps outside collectives: a data wait, a warm-up), or only polling
// ranks hold the others up, that is no deadlock: it is hung only once no rank has stepped for the idle timeout.
// Whatever the evidence, a job that has not stepped for the busy timeout is hung, unless no rank runs any more
// (kNothingRuns: the exits, which the agent is about to act on, decide). An attempt in which no rank has reported yet
// is judged only on the deadlock's signature and spins.
//
// A change to this rule starts as a line here, then a recorded case (tests/data/watch_traces/, docs/watching.md).
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "launcher/watch/evidence/python_position.hpp"
#include "launcher/watch/evidence/stack_text.hpp"
#include "launcher/watch/progress_monitor.hpp"

namespace ddprun::launcher {

/// Where a rank's main thread is in its Python script, read twice a second once a look at its stacks found it running
/// Python in its own code (python_position.hpp).
struct PythonPlace {
  PythonPosition::Status status = PythonPosition::Status::kNotPython;  ///< of the last read (kNotPython: none made)
  std::string where;  ///< the innermost frame, as the last read found it ("File "x.py", line 3, in f")
  std::string why;    ///< why it cannot be read (kUnreadable)
  /// The reads of the last spin window (spinWindowSeconds) span this long: a loop that changes nothing comes back to
  /// the same few states (PythonPosition::state) read after read; one that computes reaches new ones.
  double sameSeconds = 0;
  size_t sameReads = 0;       ///< of those reads, the ones that found it in a state it had been in (in this suspicion)
  size_t instructions = 0;    ///< distinct bytecode positions of the innermost frame in this suspicion's reads
  bool backwardJump = false;  ///< the last read found the innermost frame on an instruction that jumps backwards
  size_t newReads = 0;        ///< of the window's reads, the ones that found it in a state it had not been in
};

/// One rank's evidence at the time of the judgement.
struct RankEvidence {
  size_t localRank = 0;
  int globalRank = 0;
  bool running = true;
  bool exitedEarly = false;  ///< exited 0 while its peers still ran, at least a timeout ago
  /// Exited 0 while its peers still run, less than a timeout ago: they may be finishing a last collective with it
  /// (a final barrier, on a loaded machine): it counts as working, not yet as an early exit.
  bool justExited = false;
  double idleSeconds = 0;             ///< seen idle: not stepping, using CPU or moving bytes (activity_monitor.hpp)
  bool polls = false;                 ///< its main thread keeps waking up: a wait loop, not one blocked call
  bool starved = false;               ///< it waited for a CPU while computing in the last interval sampled
  std::optional<double> cpuShare;     ///< of one core, over the last sample
  bool waitsForInput = false;         ///< its main thread reads console input
  bool stopped = false;               ///< its main thread is stopped (SIGSTOP, a debugger): a person's doing
  bool heldByConsole = false;         ///< ddprun does not read its output (the console is full): it may wait in write
  double quietSeconds = 0;            ///< since its communication moved: bytes, storage, CPU of its other threads
  double mainIdleSeconds = 0;         ///< since its main thread used CPU
  double ioIdleSeconds = 0;           ///< since it moved bytes or touched storage
  std::optional<double> workedShare;  ///< of one core, in the last interval it worked by CPU
  double samePositionSeconds = 0;     ///< how long its main thread has been seen in one place (0: in one look or none)
  /// How long its main thread has been in its place (MainThreadPlace) when a look of this suspicion saw it enter
  /// there; unset when it was already there at the suspicion's first look (since when is not known).
  std::optional<double> inPlaceSeconds;
  std::optional<MainThread> mainThread;  ///< none: its stacks were not taken (yet)
  PythonPlace python;                    ///< where it is in Python, when its main thread runs Python
};

struct RuleSettings {
  double busyTimeoutSeconds = 1800;  ///< --hang-busy-timeout
  double idleTimeoutSeconds = 600;   ///< --hang-idle-timeout: every rank idle outside any collective
  double spinTimeoutSeconds = 55;    ///< one place, CPU alone, while a peer waits in a collective
  bool multiNode = false;            ///< other nodes hold ranks this agent cannot see
  bool spinIsHang = false;           ///< --hang-spin-action restart: a spin is a hang, not only reported
  bool unreported = false;           ///< no rank of the attempt has reported: no idle or busy timeout applies
};

enum class Verdict {
  kNeedStacks,        ///< the main threads of the running ranks must be looked at first
  kWorking,           ///< a rank works: not a hang, keep watching
  kWaitingElsewhere,  ///< every local rank waits in a collective, and the cause may be on another node
  kIdle,              ///< no rank works and none waits on a peer (or only polling ranks hold the others up): no
                      ///< deadlock, judged by the idle timeout
  kSpinning,          ///< ranks spin while their peers wait: reported, not acted on (RuleSettings::spinIsHang)
  kNothingRuns,       ///< every rank has exited: their exits, not the watch, decide how the attempt ended
  kHung,
};

struct Judgement {
  Verdict verdict = Verdict::kWorking;
  std::vector<size_t> working;   ///< kWorking: indices (into the evidence) of the ranks that work
  std::vector<size_t> waiting;   ///< indices of the running ranks that wait on their peers (the deadlock's signature)
  std::vector<size_t> culprits;  ///< kHung: indices of the ranks that hold the job up (all, when every one waits)
  std::vector<size_t> spinning;  ///< of the culprits, those that spin in one place
  std::vector<size_t> polling;   ///< running ranks idle outside collectives whose main thread keeps waking up
  bool byBusyTimeout = false;    ///< hung because nobody stepped for the busy timeout, though ranks worked
  bool byIdleTimeout = false;    ///< hung because every rank was idle outside collectives for the idle timeout
};

/// How long a rank must be seen in one place, CPU alone, before it spins (seconds): the spin timeout counts from the
/// last step, and stacks are first taken a hang timeout after it.
double spinWindowSeconds(const Suspicion& suspicion, const RuleSettings& settings);

/// Applies the rule above.
Judgement judgeHang(const Suspicion& suspicion, const std::vector<RankEvidence>& ranks, const RuleSettings& settings);

/// What was seen, for the hang line: "no rank has stepped for 5.2 s (last step 30) and nothing moves: rank 1's main
/// thread is in …; rank 0 waits in a collective (…) and has moved no data for 5.1 s; hang timeout 5.0 s (the floor,
/// --hang-min-timeout; …)".
std::string describeHang(const Suspicion& suspicion, const std::vector<RankEvidence>& ranks, const Judgement& judgement,
                         const RuleSettings& settings);

/// One rank in one clause: "rank 1's main thread is in …", "rank 0 waits in a collective (…)", "rank 2 works (…)".
std::string describeRank(const RankEvidence& rank, double timeoutSeconds);

/// Why a suspected job is not hung (kWorking, kWaitingElsewhere, kIdle, kSpinning), for one log line; names the ranks
/// that wait in a collective meanwhile.
std::string describeWorking(const Suspicion& suspicion, const std::vector<RankEvidence>& ranks,
                            const Judgement& judgement, const RuleSettings& settings);

/// The hint for jobs that report only steps; "" when it does not apply.
std::string hangHint(const Suspicion& suspicion);

/// Where a timeout comes from, in words ("the floor, --hang-min-timeout; the longest train interval seen is 0.06 s").
std::string describeTimeout(const Suspicion& suspicion);

}  // namespace ddprun::launcher
