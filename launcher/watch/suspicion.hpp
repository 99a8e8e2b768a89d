#pragma once
// The current suspicion's state: from a rank passing its hang timeout until the job moves again, what each look at the
// ranks found (where each main thread was in its native stacks, and, for a rank running Python in its own code, where
// it was in its script read after read). One struct, reset with `= {}` when the job moves again, a new attempt starts
// or a rank is replaced; the watch (worker_watch.hpp) feeds it and turns it into the hang rule's evidence.
#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "launcher/watch/hang_rule.hpp"
#include "launcher/watch/watch_ports.hpp"

namespace ddprun::launcher {

using SteadyTime = std::chrono::steady_clock::time_point;

struct SuspicionState {
  /// What the looks of this suspicion found of one rank.
  struct Look {
    MainThread thread;
    SteadyTime at{};
    SteadyTime samePositionSince{};  ///< the first look of this suspicion in which the thread was where it is now
    /// The look that saw the thread enter its place (MainThreadPlace); unset while it is where the first look of this
    /// suspicion found it.
    std::optional<SteadyTime> placeEnteredAt;
    PythonPlace python;  ///< where the thread is in Python, from the reads since the first look
    /// PythonPosition::state of the reads since the first look (emptied when a read fails, restarted past
    /// kMaxPythonStates)
    std::set<uint64_t> pythonStates;
    std::set<uint64_t> pythonInstructions;  ///< PythonPosition::instruction of those reads
    /// The last reads (at most kMaxPythonReads): when, and whether each found a state not in pythonStates.
    std::deque<std::pair<SteadyTime, bool>> pythonReads;
    SteadyTime pythonReadAt{};
  };

  bool active = false;  ///< a suspicion is on
  /// Samples count as evidence for the verdict when taken after this: the suspicion's start, then each look's end
  /// (a look holds the ranks, and what a sample saw before it is older than the suspicion).
  SteadyTime freshAfter{};
  std::map<size_t, SteadyTime> sampledAt;  ///< when each rank was last sampled (as read, not shifted for looks)
  bool explained = false;                  ///< "not a hang: …" was logged
  bool looking = false;                    ///< stacks are being taken
  SteadyTime lookStarted{};
  SteadyTime warnedAt{};      ///< the last warning about a rank that spins or works while its peers wait
  bool spinReported = false;  ///< a spin was reported in this suspicion
  std::map<size_t, Look> looks;

  /// A look at `local`'s stacks ended at `now`.
  void recordStacks(size_t local, const MainThread& thread, SteadyTime now);
  /// Whether `local`'s Python position should be read now: a look found it running Python in its own code, and the
  /// last read is older than `every`.
  bool wantsPython(size_t local, SteadyTime now, std::chrono::milliseconds every) const;
  /// A read of `local`'s Python position taken at `at`. Returns true when the read found its Python unreadable for the
  /// first time in this suspicion (the watch says so once).
  bool recordPython(size_t local, const PythonPosition& position, SteadyTime at);
  /// Fills `rank`'s stacks and Python place: stacks count while younger than `timeout` seconds; the Python reads of the
  /// last `spinWindow` seconds (spinWindowSeconds) are counted.
  void fill(size_t local, double timeout, double spinWindow, SteadyTime now, RankEvidence& rank) const;
};

}  // namespace ddprun::launcher
