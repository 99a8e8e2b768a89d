#include "launcher/watch/hang_rule.hpp"

#include <algorithm>
#include <cstdio>

namespace ddprun::launcher {
namespace {

std::string seconds1(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", value);
  return text;
}

std::string seconds2(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", value);
  return text;
}

MainThreadPlace placeOf(const RankEvidence& rank) {
  return rank.mainThread ? rank.mainThread->place : MainThreadPlace::kUnknown;
}

bool active(const RankEvidence& rank, double timeout) { return rank.idleSeconds < timeout; }

/// Reads of a Python position in a row that must find it unchanged before it counts as one place: with twice a
/// second over the spin timeout there are many more; fewer mean the reads could not keep up (a starved machine), and
/// a few reads can meet a computing loop in one place by chance.
constexpr size_t kMinSameReads = 10;

/// In one place for `needed` seconds: the same native stacks in every look, or where the thread runs Python, no new
/// Python state in any read, over more than one bytecode. The native stacks of a Python loop move between the
/// interpreter and what its bytecodes call (a comparison, a dict lookup), spin or not.
bool staysInOnePlace(const RankEvidence& rank, double needed) {
  if (!rank.mainThread->runsPython) return rank.samePositionSeconds >= needed;
  const PythonPlace& python = rank.python;
  return python.status == PythonPosition::Status::kRead && python.sameSeconds >= needed &&
         python.sameReads >= kMinSameReads && 4 * python.newReads <= python.sameReads + python.newReads &&
         (python.instructions >= 2 || (python.instructions == 1 && python.backwardJump));
}

bool heldByPerson(const RankEvidence& rank) { return rank.waitsForInput || rank.stopped || rank.heldByConsole; }

bool ownCode(const RankEvidence& rank) {
  const MainThreadPlace place = placeOf(rank);
  return place == MainThreadPlace::kOther || place == MainThreadPlace::kUnknown;
}

/// Idle outside any collective: such a rank holds the others up (unless it polls: it waits for something else).
bool idleOutsideCollectives(const RankEvidence& rank, double timeout) {
  return rank.running && !heldByPerson(rank) && !active(rank, timeout) && ownCode(rank);
}

/// Its main thread is in a collective that moves data: its communication moved, or its main thread computed where the
/// backend's wait does not spin.
bool collectiveMoves(const RankEvidence& rank, double timeout) {
  if (placeOf(rank) != MainThreadPlace::kCollective) return false;
  return rank.quietSeconds < timeout || (!rank.mainThread->waitSpins && rank.mainIdleSeconds < timeout);
}

/// Its main thread is in a collective that moves nothing: it waits for its peers, and has for the timeout where a
/// look saw it arrive. Its idleness alone cannot say so: a rank that slept (a pause every rank takes) and then
/// entered the collective with a compute too short for the CPU clock's ticks looks idle since before the sleep, while
/// its peer, still in the same pause, may be about to join it.
bool stuckInCollective(const RankEvidence& rank, double timeout) {
  return rank.running && placeOf(rank) == MainThreadPlace::kCollective && !collectiveMoves(rank, timeout) &&
         rank.inPlaceSeconds.value_or(timeout) >= timeout;
}

std::string percent(double share) { return std::to_string(static_cast<int>(share * 100 + 0.5)) + "% of a core"; }

/// What made an active rank count as working, for its clause.
std::string workText(const RankEvidence& rank, double timeout) {
  if (rank.workedShare) return ", " + percent(*rank.workedShare);
  if (rank.ioIdleSeconds < timeout) return ", reading or writing";
  if (rank.starved) return ", waiting for a CPU: the machine is loaded";
  return "";
}

/// "; Python at File …" where its Python position is known.
std::string pythonText(const RankEvidence& rank) {
  if (!rank.mainThread || !rank.mainThread->runsPython) return "";
  if (!rank.python.where.empty()) return "; Python at " + rank.python.where;
  return "";
}

}  // namespace

std::string describeRank(const RankEvidence& rank, double timeout) {
  const std::string who = "rank " + std::to_string(rank.globalRank);
  if (rank.exitedEarly) return who + " exited 0 while its peers still ran";
  if (rank.justExited) return who + " has just exited 0 (its peers may be finishing a last collective with it)";
  if (rank.waitsForInput) return who + " waits for console input";
  if (rank.stopped) return who + " is stopped (SIGSTOP, or a debugger holds it)";
  if (rank.heldByConsole) return who + " waits for the console (ddprun's console does not take its output fast enough)";
  if (!rank.mainThread || rank.mainThread->place == MainThreadPlace::kUnknown) {
    return who + (active(rank, timeout) ? " works (no stacks" + workText(rank, timeout) + ")" : " is idle (no stacks)");
  }
  const std::string where = describe(*rank.mainThread);
  switch (rank.mainThread->place) {
    case MainThreadPlace::kCollective:
      if (collectiveMoves(rank, timeout)) return who + " is in a collective that moves data (" + where + ")";
      return who + " waits in a collective (" + where + ") and has moved no data for " +
             seconds1(
                 std::min(rank.quietSeconds, rank.mainThread->waitSpins ? rank.quietSeconds : rank.mainIdleSeconds)) +
             " s";
    case MainThreadPlace::kGpu: return who + " waits for its GPU (" + where + ")";
    case MainThreadPlace::kExiting: return who + " is exiting (" + where + ")";
    default: break;
  }
  if (active(rank, timeout)) {
    std::string text = who + " works (main thread in " + where + workText(rank, timeout) + pythonText(rank);
    if (rank.mainThread->runsPython && rank.python.status == PythonPosition::Status::kUnreadable) {
      text += "; its Python position cannot be read (" + rank.python.why +
              "), so a spin there is found only by --hang-busy-timeout";
    }
    return text + ")";
  }
  if (rank.polls) return who + " polls (its main thread keeps waking up in " + where + pythonText(rank) + ")";
  return who + "'s main thread is in " + where + pythonText(rank);
}

namespace {

std::string joinClauses(const std::vector<RankEvidence>& ranks, const std::vector<size_t>& first, double timeout,
                        const std::vector<size_t>& spinning = {}) {
  // The given ranks first, then the others that are still relevant (running or exited early).
  std::string text;
  std::vector<bool> done(ranks.size(), false);
  const auto add = [&](size_t i) {
    if (done[i]) return;
    done[i] = true;
    if (!ranks[i].running && !ranks[i].exitedEarly && !ranks[i].justExited) return;
    std::string clause = describeRank(ranks[i], timeout);
    if (std::find(spinning.begin(), spinning.end(), i) != spinning.end()) {
      const RankEvidence& rank = ranks[i];
      clause = "rank " + std::to_string(rank.globalRank) + " spins in one place (";
      if (rank.mainThread->runsPython) {
        clause += rank.python.where + ", " + std::to_string(rank.python.sameReads) + " of " +
                  std::to_string(rank.python.sameReads + rank.python.newReads) + " reads over " +
                  seconds1(rank.python.sameSeconds) + " s came back to a line and values seen before" +
                  workText(rank, timeout) + ", no I/O)";
      } else {
        clause += "main thread in " + describe(*rank.mainThread) + workText(rank, timeout) +
                  ", no I/O, the same stacks for " + seconds1(rank.samePositionSeconds) + " s)";
      }
    }
    text += (text.empty() ? "" : "; ") + clause;
  };
  for (size_t i : first) add(i);
  for (size_t i = 0; i < ranks.size(); ++i) add(i);
  return text;
}

/// One rank as the rule reads it.
struct Reading {
  bool idleOutside = false;  ///< idle outside any collective: it holds the others up, unless it polls
  bool stuck = false;        ///< in a collective that moves nothing
  bool spins = false;        ///< CPU alone, in one place for the spin timeout, while a peer is stuck in a collective
};

std::vector<Reading> read(const std::vector<RankEvidence>& ranks, const Suspicion& suspicion,
                          const RuleSettings& settings) {
  const double timeout = suspicion.timeoutSeconds;
  // Stacks are first taken when the suspicion begins, a timeout after the last step: a thread seen in one place in
  // every look since has been there for the whole stall, as far as anyone can tell.
  const bool stalledLongEnough = suspicion.stalledSeconds >= settings.spinTimeoutSeconds;
  const double samePlaceNeeded = spinWindowSeconds(suspicion, settings);
  std::vector<Reading> readings(ranks.size());
  bool anyStuck = false;
  for (size_t i = 0; i < ranks.size(); ++i) {
    readings[i].idleOutside = idleOutsideCollectives(ranks[i], timeout);
    readings[i].stuck = stuckInCollective(ranks[i], timeout);
    anyStuck = anyStuck || readings[i].stuck;
  }
  for (size_t i = 0; i < ranks.size(); ++i) {
    const RankEvidence& rank = ranks[i];
    readings[i].spins = anyStuck && rank.running && !heldByPerson(rank) && placeOf(rank) == MainThreadPlace::kOther &&
                        !rank.mainThread->computes && active(rank, timeout) && stalledLongEnough &&
                        rank.ioIdleSeconds >= settings.spinTimeoutSeconds && staysInOnePlace(rank, samePlaceNeeded);
  }
  return readings;
}

}  // namespace

double spinWindowSeconds(const Suspicion& suspicion, const RuleSettings& settings) {
  return std::max(settings.spinTimeoutSeconds - suspicion.timeoutSeconds, 0.5 * settings.spinTimeoutSeconds);
}

Judgement judgeHang(const Suspicion& suspicion, const std::vector<RankEvidence>& ranks, const RuleSettings& settings) {
  Judgement judgement;
  const double timeout = suspicion.timeoutSeconds;
  // A tick after the last exit (the agent has not yet acted on it) still sees the steps stopped; nothing can hang then,
  // and a verdict would turn a job that exited 0 into a hang.
  if (std::none_of(ranks.begin(), ranks.end(), [](const RankEvidence& rank) { return rank.running; })) {
    judgement.verdict = Verdict::kNothingRuns;
    return judgement;
  }
  for (const auto& rank : ranks) {
    if (rank.running && !rank.mainThread) {
      judgement.verdict = Verdict::kNeedStacks;
      return judgement;
    }
  }
  const std::vector<Reading> readings = read(ranks, suspicion, settings);
  std::vector<size_t> culprits;
  bool anyIdleOutside = false;  // a running rank idle outside collectives (an early exit is not one)
  bool deadlock = false;        // a culprit that neither spins nor polls
  for (size_t i = 0; i < ranks.size(); ++i) {
    anyIdleOutside = anyIdleOutside || readings[i].idleOutside;
    const bool polls = readings[i].idleOutside && ranks[i].polls;
    if (polls) judgement.polling.push_back(i);
    if (ranks[i].exitedEarly || (readings[i].idleOutside && !polls) || readings[i].spins) culprits.push_back(i);
    if (readings[i].spins) judgement.spinning.push_back(i);
    deadlock = deadlock || ranks[i].exitedEarly || (readings[i].idleOutside && !polls);
  }
  for (size_t i = 0; i < ranks.size(); ++i) {
    const RankEvidence& rank = ranks[i];
    if (rank.justExited) judgement.working.push_back(i);
    if (!rank.running) continue;
    const MainThreadPlace place = placeOf(rank);
    // A GPU wait counts as work unless a rank that holds the others up explains it.
    const bool gpuMayCompute = place == MainThreadPlace::kGpu && culprits.empty();
    // A rank in its exit path is finishing: work, even where the exit tears down a process group or waits in a
    // last collective, and a peer that exited 0 first is then no early exit; unless a running rank idle outside
    // collectives explains the wait (and, as for all work, until the busy timeout).
    const bool exiting = place == MainThreadPlace::kExiting && !anyIdleOutside;
    const bool works = heldByPerson(rank) || (active(rank, timeout) && ownCode(rank) && !readings[i].spins) ||
                       collectiveMoves(rank, timeout) || gpuMayCompute || exiting;
    if (works) {
      judgement.working.push_back(i);
    } else if (readings[i].stuck || place == MainThreadPlace::kGpu ||
               (place == MainThreadPlace::kExiting && rank.mainThread->inCollective)) {
      judgement.waiting.push_back(i);  // waits on its peers: in a collective, or for a GPU that waits in one
    }
  }
  const bool pastBusyTimeout = !settings.unreported && suspicion.stalledSeconds >= settings.busyTimeoutSeconds;
  if (!judgement.working.empty() && !pastBusyTimeout) {
    judgement.verdict = Verdict::kWorking;
    return judgement;
  }
  judgement.byBusyTimeout = !judgement.working.empty();
  // Nobody works and nobody waits on a peer (every rank sleeps outside collectives: a data wait, a warm-up, or
  // exited), or the only ranks that hold the others up poll: no deadlock, and only the idle timeout makes it a hang.
  const bool onlyPolling = culprits.empty() && !judgement.polling.empty();
  if (!judgement.byBusyTimeout && (judgement.waiting.empty() || onlyPolling)) {
    if (settings.unreported || suspicion.stalledSeconds < settings.idleTimeoutSeconds) {
      judgement.verdict = Verdict::kIdle;
      return judgement;
    }
    judgement.byIdleTimeout = true;
    if (onlyPolling) culprits = judgement.polling;
  }
  if (!judgement.byIdleTimeout && !deadlock && !judgement.spinning.empty()) {
    if (!settings.spinIsHang && !pastBusyTimeout) {
      judgement.verdict = Verdict::kSpinning;  // reported: a spin cannot be told from a long computation for sure
      judgement.culprits = std::move(culprits);
      return judgement;
    }
    judgement.byBusyTimeout = !settings.spinIsHang;  // it kept working, as far as anyone can tell
  }
  if (culprits.empty()) {
    if (settings.multiNode && !pastBusyTimeout) {
      judgement.verdict = Verdict::kWaitingElsewhere;
      return judgement;
    }
    // Every rank waits in a collective (or, past the busy timeout, works without stepping): all of them.
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (ranks[i].running) culprits.push_back(i);
    }
    if (judgement.byBusyTimeout) culprits = judgement.working;
  }
  judgement.verdict = Verdict::kHung;
  judgement.culprits = std::move(culprits);
  return judgement;
}

std::string describeTimeout(const Suspicion& s) {
  const std::string factor = seconds1(s.safetyFactor);
  switch (s.source) {
    case TimeoutSource::kFloor:
      return "the floor, --hang-min-timeout; " +
             (s.learntSeconds > 0 ? "the longest " + s.phase + " interval seen is " + seconds2(s.learntSeconds) + " s"
                                  : "no " + s.phase + " interval seen yet");
    case TimeoutSource::kLearnt:
      return factor + " x the longest " + s.phase + " interval seen, " + seconds2(s.learntSeconds) + " s";
    case TimeoutSource::kStartup:
      return factor + " x the longest start-up seen, " + seconds2(s.learntSeconds) +
             " s, for ranks without a report in this attempt";
    case TimeoutSource::kFlag: return "--hang-timeout";
    case TimeoutSource::kOutput: return "--output-timeout, no output";
    case TimeoutSource::kUnreported:
      return "no rank has reported in this attempt: twice the floor, --hang-min-timeout, or --hang-timeout";
  }
  return "";
}

std::string describeHang(const Suspicion& s, const std::vector<RankEvidence>& ranks, const Judgement& judgement,
                         const RuleSettings& settings) {
  std::string text;
  if (s.source == TimeoutSource::kUnreported) {
    text = "no rank has reported progress in this attempt (started " + seconds1(s.stalledSeconds) + " s ago)";
  } else {
    text = "no rank has " + std::string(s.source == TimeoutSource::kOutput ? "written output or " : "") +
           "stepped for " + seconds1(s.stalledSeconds) + " s";
    if (s.lastStep)
      text += " (last step " + std::to_string(*s.lastStep) + (s.phase != "train" ? ", phase " + s.phase : "") + ")";
  }
  if (judgement.byBusyTimeout) {
    text +=
        ", longer than --hang-busy-timeout " + seconds1(settings.busyTimeoutSeconds) + " s, though ranks kept working";
  } else if (judgement.byIdleTimeout) {
    text += ", longer than --hang-idle-timeout " + seconds1(settings.idleTimeoutSeconds) + " s, and no rank worked" +
            (judgement.polling.empty() ? " or waited on a peer" : "");
  } else if (!judgement.spinning.empty()) {
    text += ", and the ranks that wait in a collective wait for one that spins";
  } else {
    text += ", and nothing moves";
  }
  text += ": " + joinClauses(ranks, judgement.culprits, s.timeoutSeconds, judgement.spinning);
  text += "; hang timeout " + seconds1(s.timeoutSeconds) + " s (" + describeTimeout(s) + ")";
  return text;
}

std::string describeWorking(const Suspicion& s, const std::vector<RankEvidence>& ranks, const Judgement& judgement,
                            const RuleSettings& settings) {
  std::string text = s.source == TimeoutSource::kUnreported
                         ? "no progress reported in this attempt yet (" + seconds1(s.stalledSeconds) + " s), but "
                         : "no step for " + seconds1(s.stalledSeconds) + " s (hang timeout " +
                               seconds1(s.timeoutSeconds) + " s), but ";
  if (judgement.verdict == Verdict::kWaitingElsewhere) {
    return text +
           "every local rank waits in a collective, so the cause may be on another node (its agent judges "
           "it); --hang-busy-timeout still applies";
  }
  if (judgement.verdict == Verdict::kSpinning) {
    return text + joinClauses(ranks, judgement.culprits, s.timeoutSeconds, judgement.spinning) +
           ": a spin, or a long computation that looks like one; ddprun " +
           (settings.unreported
                ? "reports it"
                : "stops the group only after --hang-busy-timeout " + seconds1(settings.busyTimeoutSeconds) + " s") +
           " (--hang-spin-action restart: at once)";
  }
  if (judgement.verdict == Verdict::kIdle) {
    if (!judgement.polling.empty() && !judgement.waiting.empty()) {
      text += joinClauses(ranks, judgement.polling, s.timeoutSeconds) +
              ": a wait loop waits for something outside the job (a file, a queue), which is no deadlock";
    } else {
      text += "no rank waits in a collective (" + joinClauses(ranks, {}, s.timeoutSeconds) +
              "): every rank is idle outside one, as in a wait for data or a warm-up, which is no deadlock";
    }
    if (settings.unreported) return text;
    return text + "; hung only after --hang-idle-timeout " + seconds1(settings.idleTimeoutSeconds) +
           " s without a step";
  }
  std::string working;
  for (size_t i : judgement.working)
    working += (working.empty() ? "" : "; ") + describeRank(ranks[i], s.timeoutSeconds);
  std::string waiting;
  for (size_t i : judgement.waiting)
    waiting += (waiting.empty() ? "" : "; ") + describeRank(ranks[i], s.timeoutSeconds);
  text += working;
  if (!waiting.empty()) text += ", while " + waiting;
  return text + ": not a hang";
}

std::string hangHint(const Suspicion& s) {
  if (!s.stepsOnly || s.source == TimeoutSource::kFlag || s.source == TimeoutSource::kOutput) return "";
  return "hint: this job reports only its steps; announce evaluations, checkpoints and other long pauses as "
         "phases (docs/watching.md), or set --hang-timeout SECONDS";
}

}  // namespace ddprun::launcher
