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

/// Idle outside any collective: such a rank holds the others up.
bool idleOutsideCollectives(const RankEvidence& rank, double timeout) {
  const MainThreadPlace place = placeOf(rank);
  return rank.running && !rank.waitsForInput && !rank.stopped && !rank.heldByConsole && !active(rank, timeout) &&
         (place == MainThreadPlace::kOther || place == MainThreadPlace::kUnknown);
}

std::string cpuText(const RankEvidence& rank) {
  if (!rank.cpuShare) return "";
  return ", " + std::to_string(static_cast<int>(*rank.cpuShare * 100 + 0.5)) + "% of a core";
}

}  // namespace

std::string describeRank(const RankEvidence& rank, double timeout) {
  const std::string who = "rank " + std::to_string(rank.globalRank);
  if (rank.exitedEarly) return who + " exited 0 while its peers still ran";
  if (rank.waitsForInput) return who + " waits for console input";
  if (rank.stopped) return who + " is stopped (SIGSTOP, or a debugger holds it)";
  if (rank.heldByConsole) return who + " waits for the console (ddprun's console does not take its output fast enough)";
  if (!rank.mainThread || rank.mainThread->place == MainThreadPlace::kUnknown) {
    return who + (active(rank, timeout) ? " works (no stacks" + cpuText(rank) + ")" : " is idle (no stacks)");
  }
  const std::string where = describe(*rank.mainThread);
  switch (rank.mainThread->place) {
    case MainThreadPlace::kCollective: return who + " waits in a collective (" + where + ")";
    case MainThreadPlace::kGpu: return who + " waits for its GPU (" + where + ")";
    case MainThreadPlace::kExiting: return who + " is exiting (" + where + ")";
    default: break;
  }
  if (active(rank, timeout)) return who + " works (main thread in " + where + cpuText(rank) + ")";
  return who + "'s main thread is in " + where;
}

namespace {

std::string joinClauses(const std::vector<RankEvidence>& ranks, const std::vector<size_t>& first, double timeout) {
  // The given ranks first, then the others that are still relevant (running or exited early).
  std::string text;
  std::vector<bool> done(ranks.size(), false);
  const auto add = [&](size_t i) {
    if (done[i]) return;
    done[i] = true;
    if (!ranks[i].running && !ranks[i].exitedEarly) return;
    text += (text.empty() ? "" : "; ") + describeRank(ranks[i], timeout);
  };
  for (size_t i : first) add(i);
  for (size_t i = 0; i < ranks.size(); ++i) add(i);
  return text;
}

}  // namespace

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
  std::vector<size_t> culprits;
  bool anyIdleOutside = false;  // a running rank idle outside collectives (an early exit is not one)
  for (size_t i = 0; i < ranks.size(); ++i) {
    const bool idle = idleOutsideCollectives(ranks[i], timeout);
    anyIdleOutside = anyIdleOutside || idle;
    if (ranks[i].exitedEarly || idle) culprits.push_back(i);
  }
  for (size_t i = 0; i < ranks.size(); ++i) {
    const RankEvidence& rank = ranks[i];
    if (!rank.running) continue;
    const MainThreadPlace place = placeOf(rank);
    const bool ownCode = place == MainThreadPlace::kOther || place == MainThreadPlace::kUnknown;
    // A GPU wait counts as work unless a rank idle outside collectives explains it.
    const bool gpuMayCompute = place == MainThreadPlace::kGpu && culprits.empty();
    // A rank in its exit path is finishing: work, even where the exit tears down a process group or waits in a
    // last collective, and a peer that exited 0 first is then no early exit; unless a running rank idle outside
    // collectives explains the wait (and, as for all work, until the busy timeout).
    const bool exiting = place == MainThreadPlace::kExiting && !anyIdleOutside;
    if (rank.waitsForInput || rank.stopped || rank.heldByConsole || (active(rank, timeout) && ownCode) ||
        gpuMayCompute || exiting) {
      judgement.working.push_back(i);
    }
  }
  const bool pastBusyTimeout = suspicion.stalledSeconds >= settings.busyTimeoutSeconds;
  if (!judgement.working.empty() && !pastBusyTimeout) {
    judgement.verdict = Verdict::kWorking;
    return judgement;
  }
  judgement.byBusyTimeout = !judgement.working.empty();
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
  }
  return "";
}

std::string describeHang(const Suspicion& s, const std::vector<RankEvidence>& ranks, const Judgement& judgement,
                         const RuleSettings& settings) {
  std::string text = "no rank has " + std::string(s.source == TimeoutSource::kOutput ? "written output or " : "") +
                     "stepped for " + seconds1(s.stalledSeconds) + " s";
  if (s.lastStep)
    text += " (last step " + std::to_string(*s.lastStep) + (s.phase != "train" ? ", phase " + s.phase : "") + ")";
  if (judgement.byBusyTimeout) {
    text +=
        ", longer than --hang-busy-timeout " + seconds1(settings.busyTimeoutSeconds) + " s, though ranks kept working";
  } else {
    double idle = -1;
    for (const auto& rank : ranks) {
      if (rank.running && (idle < 0 || rank.idleSeconds < idle)) idle = rank.idleSeconds;
    }
    text += idle >= 0 ? " and none has worked (CPU, I/O) outside a collective for " + seconds1(idle) + " s" : "";
  }
  text += "; " + joinClauses(ranks, judgement.culprits, s.timeoutSeconds);
  text += "; hang timeout " + seconds1(s.timeoutSeconds) + " s (" + describeTimeout(s) + ")";
  return text;
}

std::string describeWorking(const Suspicion& s, const std::vector<RankEvidence>& ranks, const Judgement& judgement) {
  std::string text =
      "no step for " + seconds1(s.stalledSeconds) + " s (hang timeout " + seconds1(s.timeoutSeconds) + " s), but ";
  if (judgement.verdict == Verdict::kWaitingElsewhere) {
    return text +
           "every local rank waits in a collective, so the cause may be on another node (its agent judges "
           "it); --hang-busy-timeout still applies";
  }
  std::string working;
  for (size_t i : judgement.working)
    working += (working.empty() ? "" : "; ") + describeRank(ranks[i], s.timeoutSeconds);
  return text + working + ": not a hang";
}

std::string hangHint(const Suspicion& s) {
  if (!s.stepsOnly || s.source == TimeoutSource::kFlag || s.source == TimeoutSource::kOutput) return "";
  return "hint: this job reports only its steps; announce evaluations, checkpoints and other long pauses as "
         "phases (docs/watching.md), or set --hang-timeout SECONDS";
}

}  // namespace ddprun::launcher
