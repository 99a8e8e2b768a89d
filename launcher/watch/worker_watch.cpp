#include "launcher/watch/worker_watch.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>

#include "common/untrusted_file.hpp"
#include "launcher/watch/stack_collector.hpp"

namespace ddprun::launcher {
namespace {

/// Native stacks of every rank together get this long; Python tracebacks as long again.
constexpr std::chrono::milliseconds kStackBudget{3000};
/// Flight recorder dumps get this long: torch's monitor looks at its pipe and the store about once a second, then
/// writes the dump with stack traces (4.7-6.0 s from the request for one rank on torch 2.11, H200); 15 s is torch's
/// own wait for a dump before it aborts (TORCH_FR_WAIT_TIMEOUT_DUMP_MILSEC). The wait ends when the dumps are complete.
constexpr std::chrono::milliseconds kDumpBudget{15000};
/// A dump is complete once its file has not changed for this long (DumpFileWatch). torch's monitor reads the pipe
/// and the store key within about a second of each other and builds both dumps at once; the two writes are then
/// serialised, so a second write begins well within this.
constexpr std::chrono::milliseconds kDumpQuiet{3000};
/// A rank is sampled (/proc) once it has made no progress for this long, at most this often.
constexpr std::chrono::milliseconds kSampleAfter{500};
constexpr std::chrono::milliseconds kSampleEvery{500};
/// A rank in one place, CPU alone, while a peer waits in a collective spins after --hang-spin-timeout, or this many
/// times the longest step, whichever is longer.
constexpr double kSpinStepFactor = 20;
/// A loop's body has at most this many Python states that come back (one per line); more, and it computes.
constexpr size_t kMaxPythonStates = 64;
/// A rank that exited 0 is named once it has been gone this long while its peers still run (ranks that end
/// together, as at the end of every job, are not).
constexpr std::chrono::seconds kEarlyExitGrace{1};

double secondsBetween(SteadyTime from, SteadyTime to) { return std::chrono::duration<double>(to - from).count(); }

}  // namespace

WorkerWatch::WorkerWatch(boost::asio::io_context& io, const Clock& clock, WorkerGroupView& group,
                         EvidenceSource& evidence, Settings settings, StoreKeySetter setStoreKey, HangCallback onHang)
    : io_(io),
      clock_(clock),
      group_(group),
      evidence_(evidence),
      settings_(settings),
      setStoreKey_(std::move(setStoreKey)),
      onHang_(std::move(onHang)),
      monitor_(settings.hang, settings.straggler) {}

WorkerWatch::WorkerWatch(boost::asio::io_context& io, const Clock& clock, WorkerGroupView& group,
                         std::unique_ptr<EvidenceSource> evidence, Settings settings, StoreKeySetter setStoreKey,
                         HangCallback onHang)
    : WorkerWatch(io, clock, group, *evidence, settings, std::move(setStoreKey), std::move(onHang)) {
  ownedEvidence_ = std::move(evidence);
}

void WorkerWatch::startAttempt(std::vector<RankFiles> files) {
  files_ = std::move(files);
  ++attempt_;
  suspected_ = explained_ = looking_ = verdictGiven_ = false;
  looks_.clear();
  earlyExits_.clear();
  earlyExitNamed_ = false;
  hung_.clear();
  collecting_ = Collecting::kNothing;
  dumps_.clear();
  dumpSignalRank_ = -1;
  aborted_.clear();
  afterTracebacks_ = nullptr;
  const auto now = clock_.now();
  monitor_.startAttempt(files_.size(), now);
  activity_.startAttempt(files_.size(), now);
}

bool WorkerWatch::rankReplaced(size_t local) {
  const bool endsVerdict = verdictGiven_;
  ++attempt_;  // stacks being taken now describe the group before the replacement
  suspected_ = explained_ = looking_ = verdictGiven_ = false;
  looks_.clear();
  hung_.clear();
  collecting_ = Collecting::kNothing;
  dumps_.clear();
  dumpSignalRank_ = -1;
  aborted_.clear();
  afterTracebacks_ = nullptr;
  const auto now = clock_.now();
  monitor_.regroup(now);
  for (size_t i = 0; i < files_.size(); ++i) activity_.progressed(i, now);
  if (local < files_.size()) activity_.forget(local);  // another process: its counters start over
  return endsVerdict;
}

void WorkerWatch::tick() {
  if (pausedAt_ != SteadyTime{} || files_.size() != group_.size() || files_.empty()) return;
  const auto now = clock_.now();
  observeProgress(now);
  noteEarlyExits(now);
  sampleActivity(now);
  readPythonPositions(now);
  monitor_.sampleRates(now);
  warnStragglers(monitor_.stragglers(now));
  // What a hung group is asked for is checked once a tick (and the tracebacks at every exit too).
  if (collecting_ == Collecting::kDumps) waitForDumps();
  if (collecting_ == Collecting::kTracebacks) waitForTracebacks();
  if (!verdictGiven_ && !looking_) judge(now);
}

void WorkerWatch::observeProgress(SteadyTime now) {
  for (size_t local = 0; local < files_.size(); ++local) {
    RankObservation seen;
    seen.running = !group_.exit(local).has_value();
    seen.lastOutput = group_.lastOutput(local);
    seen.progress = readProgressFile(files_[local].progress);
    if (monitor_.observe(local, seen, now)) {
      activity_.progressed(local, now);
      activity_.forget(local);  // its next quiet period is measured from a new baseline
    } else if (seen.running && group_.outputHeld(local)) {
      activity_.progressed(local, now);  // the time ddprun does not read it is not the rank's idleness
    }
  }
}

void WorkerWatch::sampleActivity(SteadyTime now) {
  // Only where the verdict may need it: an armed job (or one whose attempt has not reported yet), ranks that have
  // gone quiet. Not while ddprun's own stack tool holds the ranks (ptrace stops them: state t, no CPU).
  if (looking_) return;
  const bool unreported = settings_.hang.mode != HangSettings::Mode::kOff && !monitor_.attemptReported();
  if (!settings_.hang.outputTimeoutSeconds && !unreported && !monitor_.currentTimeoutSeconds(now)) return;
  for (size_t local = 0; local < files_.size(); ++local) {
    if (group_.exit(local)) continue;
    if (monitor_.silentSeconds(local, now) < std::chrono::duration<double>(kSampleAfter).count()) continue;
    const SteadyTime last = activity_.lastSample(local);
    if (last != SteadyTime{} && now - last < kSampleEvery) continue;
    // A collective's traffic matters only for a rank whose last look found it in one.
    const auto look = looks_.find(local);
    const bool inCollective = look != looks_.end() && look->second.thread.inCollective;
    activity_.observe(local, evidence_.activity(group_.pid(local), inCollective), now);
  }
}

void WorkerWatch::readPythonPositions(SteadyTime now) {
  if (looking_) return;
  for (auto& [local, look] : looks_) {
    const MainThread& thread = look.thread;
    if (group_.exit(local) || thread.place != MainThreadPlace::kOther || thread.computes || !thread.runsPython)
      continue;
    if (look.pythonReadAt != SteadyTime{} && now - look.pythonReadAt < kSampleEvery) continue;
    look.pythonReadAt = now;
    const PythonPosition position = evidence_.pythonPosition(group_.pid(local));
    PythonPlace& python = look.python;
    python.status = position.status;
    python.why = position.why;
    python.where = position.where();
    // A loop that changes nothing comes back to the states it was in (one per line of its body); a read that finds a
    // new one (or none) starts the count again.
    if (position.status != PythonPosition::Status::kRead) {
      look.pythonStates.clear();
      look.pythonInstructions.clear();
      python.sameReads = 0;
    } else if (look.pythonStates.insert(position.state).second) {
      if (look.pythonStates.size() > kMaxPythonStates) {
        look.pythonStates = {position.state};
        look.pythonInstructions.clear();
      }
      look.pythonSameSince = now;
      python.sameReads = 0;
    } else {
      ++python.sameReads;
    }
    if (position.status == PythonPosition::Status::kRead) look.pythonInstructions.insert(position.instruction);
    python.instructions = look.pythonInstructions.size();
  }
}

void WorkerWatch::noteEarlyExits(SteadyTime now) {
  std::vector<size_t> running;
  for (size_t local = 0; local < files_.size(); ++local) {
    const auto& exit = group_.exit(local);
    if (!exit) {
      running.push_back(local);
    } else if (exit->succeeded() && earlyExits_.count(local) == 0) {
      earlyExits_[local] = now;
    }
  }
  if (running.empty() || earlyExits_.empty() || earlyExitNamed_) return;
  for (const auto& [local, seen] : earlyExits_) {
    if (now - seen < kEarlyExitGrace) continue;
    earlyExitNamed_ = true;
    const auto step = monitor_.step(local);
    // Only noted: a rank 0 that outlives its peers to save is healthy; the summary names an early exit that broke them.
    spdlog::debug(
        "rank {} exited 0{} while rank(s) {} still run; if they now fail or hang, that early exit is the "
        "likely cause",
        group_.globalRank(local), step ? " at step " + std::to_string(*step) : "", rankList(running));
    return;
  }
}

void WorkerWatch::warnStragglers(const std::vector<Straggler>& stragglers) {
  for (const Straggler& s : stragglers) {
    ++stragglersFlagged_;
    spdlog::warn(
        "rank {} is a straggler: over the last {} s it did {:.2f} steps per {} second, the other ranks {:.2f} "
        "(more than {}x faster)",
        group_.globalRank(s.localRank), settings_.straggler.windowSeconds, s.pace, s.byBusyTime ? "busy" : "wall",
        s.othersMedian, settings_.straggler.factor);
  }
}

std::vector<RankEvidence> WorkerWatch::gatherEvidence(const Suspicion& suspicion, SteadyTime now) const {
  std::vector<RankEvidence> ranks;
  for (size_t local = 0; local < files_.size(); ++local) {
    RankEvidence rank;
    rank.localRank = local;
    rank.globalRank = group_.globalRank(local);
    const auto& exit = group_.exit(local);
    rank.running = !exit;
    // An exit 0 while peers run is early once they have gone on for a timeout without it; before that they may be
    // finishing a last collective with it (a final barrier, slow on a loaded machine).
    const auto early = earlyExits_.find(local);
    if (exit && exit->succeeded() && early != earlyExits_.end()) {
      rank.exitedEarly = secondsBetween(early->second, now) >= suspicion.timeoutSeconds;
      rank.justExited = !rank.exitedEarly;
    }
    rank.idleSeconds = activity_.idleSeconds(local, now);
    rank.quietSeconds = activity_.quietSeconds(local, now);
    rank.mainIdleSeconds = activity_.mainIdleSeconds(local, now);
    rank.ioIdleSeconds = activity_.ioIdleSeconds(local, now);
    rank.workedShare = activity_.workedShare(local);
    rank.cpuShare = activity_.cpuShare(local);
    rank.waitsForInput = activity_.waitsForInput(local);
    rank.stopped = activity_.stopped(local);
    rank.heldByConsole = group_.outputHeld(local);
    // Stacks count while younger than the timeout: a rank may have moved since.
    const auto look = looks_.find(local);
    if (look != looks_.end() && secondsBetween(look->second.at, now) < suspicion.timeoutSeconds) {
      rank.mainThread = look->second.thread;
      rank.samePositionSeconds = secondsBetween(look->second.samePositionSince, now);
      if (look->second.placeEnteredAt) rank.inPlaceSeconds = secondsBetween(*look->second.placeEnteredAt, now);
      rank.python = look->second.python;
      if (!look->second.pythonStates.empty()) {
        rank.python.sameSeconds = secondsBetween(look->second.pythonSameSince, now);
      }
    }
    ranks.push_back(std::move(rank));
  }
  return ranks;
}

std::optional<Suspicion> WorkerWatch::unreportedSuspicion(SteadyTime now) const {
  if (settings_.hang.mode == HangSettings::Mode::kOff || monitor_.attemptReported()) return std::nullopt;
  Suspicion found;
  found.source = TimeoutSource::kUnreported;
  found.stepsOnly = false;
  found.safetyFactor = settings_.hang.safetyFactor;
  found.timeoutSeconds = settings_.hang.mode == HangSettings::Mode::kFixed ? settings_.hang.fixedSeconds
                                                                           : 2 * settings_.hang.minTimeoutSeconds;
  found.stalledSeconds = monitor_.silentSeconds(0, now);  // every rank: since the attempt started
  for (size_t local = 0; local < files_.size(); ++local) {
    if (!group_.exit(local) && activity_.idleSeconds(local, now) > found.timeoutSeconds) found.ranks.push_back(local);
  }
  if (found.ranks.empty()) return std::nullopt;
  return found;
}

RuleSettings WorkerWatch::ruleSettings(const Suspicion& suspicion) const {
  RuleSettings rule;
  rule.busyTimeoutSeconds = settings_.hang.busyTimeoutSeconds;
  rule.idleTimeoutSeconds = settings_.hang.idleTimeoutSeconds;
  rule.spinTimeoutSeconds =
      std::max(settings_.hang.spinTimeoutSeconds, kSpinStepFactor * monitor_.longestInterval("train"));
  rule.multiNode = settings_.multiNode;
  rule.unreported = suspicion.source == TimeoutSource::kUnreported;
  return rule;
}

void WorkerWatch::judge(SteadyTime now) {
  auto suspicion = monitor_.suspicion(now);
  if (!suspicion) suspicion = unreportedSuspicion(now);
  if (!suspicion) {
    suspected_ = explained_ = false;  // the job moves again
    looks_.clear();
    return;
  }
  suspected_ = true;
  const auto evidence = gatherEvidence(*suspicion, now);
  const RuleSettings rule = ruleSettings(*suspicion);
  const Judgement judgement = judgeHang(*suspicion, evidence, rule);
  switch (judgement.verdict) {
    case Verdict::kNeedStacks: lookAtStacks(); return;
    case Verdict::kNothingRuns: return;
    case Verdict::kWorking:
    case Verdict::kWaitingElsewhere:
    case Verdict::kIdle:
      // A job that has not reported in this attempt (perhaps never will) hears of it only at debug level.
      if (!explained_) {
        spdlog::log(rule.unreported ? spdlog::level::debug : spdlog::level::info, "{}",
                    describeWorking(*suspicion, evidence, judgement, rule));
      }
      explained_ = true;
      return;
    case Verdict::kHung: declareHang(*suspicion, evidence, judgement, rule); return;
  }
}

void WorkerWatch::lookAtStacks() {
  // Every running rank's stacks: the verdict needs to know which main threads wait in a collective.
  std::vector<EvidenceSource::StackTarget> targets;
  for (size_t local = 0; local < files_.size(); ++local) {
    if (!group_.exit(local)) targets.push_back({local, group_.pid(local), files_[local].stacks, {}});
  }
  if (targets.empty()) return;
  looking_ = true;
  const auto started = clock_.now();
  std::map<size_t, pid_t> pids;
  for (const auto& target : targets) pids[target.localRank] = target.pid;
  evidence_.collectStacks(std::move(targets), kStackBudget,
                          [this, attempt = attempt_, pids, started](std::vector<EvidenceSource::Stacks> stacks) {
                            if (attempt != attempt_) return;  // a new attempt started meanwhile
                            looking_ = false;
                            const auto now = clock_.now();
                            // The look held the ranks (ptrace) and took no activity samples: its time is ddprun's,
                            // not the ranks' idleness (on a loaded machine a look takes seconds, longer than the
                            // floor).
                            activity_.shiftForPause(started, now);
                            for (const auto& saved : stacks) {
                              Look& look = looks_[saved.localRank];
                              MainThread thread = classifyMainThread(saved.text, pids.at(saved.localRank));
                              // A spin shows as the same place look after look, in one suspicion.
                              if (thread.position.empty() || thread.position != look.thread.position) {
                                look.samePositionSince = now;
                              }
                              const bool firstLook = look.at == SteadyTime{};
                              if (!firstLook && thread.place != look.thread.place) look.placeEnteredAt = now;
                              look.thread = std::move(thread);
                              look.at = now;
                            }
                            spdlog::debug("native stacks of {} rank(s) saved in {:.0f} ms", stacks.size(),
                                          std::chrono::duration<double, std::milli>(now - started).count());
                            if (!verdictGiven_) judge(now);
                          });
}

void WorkerWatch::declareHang(const Suspicion& suspicion, const std::vector<RankEvidence>& evidence,
                              const Judgement& judgement, const RuleSettings& rule) {
  verdictGiven_ = true;
  ++hangsDetected_;
  const bool byOutput = suspicion.source == TimeoutSource::kOutput;
  spdlog::error("hang: {}", describeHang(suspicion, evidence, judgement, rule));
  if (const std::string hint = hangHint(suspicion); !hint.empty()) spdlog::warn("{}", hint);
  std::vector<size_t> hungRanks;
  std::vector<WorkerFailure> failures;
  for (const RankEvidence& rank : evidence) {
    if (!rank.running) continue;
    const size_t local = rank.localRank;
    hungRanks.push_back(local);
    const bool culprit =
        std::find(judgement.culprits.begin(), judgement.culprits.end(), local) != judgement.culprits.end();
    WorkerFailure failure;
    failure.globalRank = rank.globalRank;
    failure.localRank = static_cast<int>(local);
    failure.pid = group_.pid(local);
    failure.cause = byOutput ? FailureCause::kOutputSilence : FailureCause::kHang;
    failure.exit.when = std::chrono::system_clock::now();
    failure.timestamp = std::chrono::duration_cast<std::chrono::seconds>(failure.exit.when.time_since_epoch()).count();
    failure.order = failure.exit.when;
    failure.waitsOnPeers = !culprit;
    failure.stacksFile = files_[local].stacks;
    const bool spins =
        std::find(judgement.spinning.begin(), judgement.spinning.end(), local) != judgement.spinning.end();
    failure.message = "hang: no progress for " + std::to_string(static_cast<int>(suspicion.stalledSeconds)) + " s" +
                      (suspicion.lastStep ? " after step " + std::to_string(*suspicion.lastStep) : "") + "; " +
                      (spins ? "rank " + std::to_string(rank.globalRank) + " spins in one place (" +
                                   (rank.python.where.empty() ? describe(*rank.mainThread) : rank.python.where) + ")"
                             : describeRank(rank, suspicion.timeoutSeconds));
    failures.push_back(std::move(failure));
    HangDetail& detail = hung_[local];
    detail.file = files_[local].stacks;
    if (rank.mainThread) detail.nativeFrame = rank.mainThread->frame;
    if (!detail.nativeFrame.empty()) {
      spdlog::info("rank {}: stacks in {}; main thread in {}", rank.globalRank, detail.file, detail.nativeFrame);
    }
  }
  monitor_.markHung(hungRanks);
  std::vector<size_t> culprits;
  for (size_t i : judgement.culprits) culprits.push_back(evidence[i].localRank);
  if (!culprits.empty()) dumpSignalRank_ = group_.globalRank(culprits.front());
  if (!culprits.empty() && culprits.size() < evidence.size()) {
    spdlog::warn("likely cause of the hang: rank {}", rankList(culprits));
  }
  onHang_(std::move(failures));
}

void WorkerWatch::saveTracebacksThen(std::function<void()> then) {
  afterTracebacks_ = std::move(then);
  collecting_ = Collecting::kDumps;
  // Each dump file as it was before the request: a file already there is no answer until it changes.
  std::map<size_t, DumpFileWatch> before;
  for (size_t local = 0; local < files_.size(); ++local) {
    before.emplace(local, DumpFileWatch(files_[local].flightRecorder.dumpFile));
  }
  const auto asked = requestFlightRecorderDumps();
  dumps_.clear();
  for (size_t local : asked) dumps_.emplace(local, before.at(local));
  dumpDeadline_ = clock_.now() + kDumpBudget;
  if (!asked.empty()) {
    spdlog::info("asked rank(s) {} for their NCCL flight recorder dumps (at most {} s)", rankList(asked),
                 std::chrono::duration_cast<std::chrono::seconds>(kDumpBudget).count());
  }
  // Continued on the loop, never inside the caller (the policy asked from one of its event methods); with dumps
  // to wait for, on the next ticks.
  if (asked.empty()) {
    boost::asio::post(io_, [this, attempt = attempt_] {
      if (attempt == attempt_ && collecting_ == Collecting::kDumps) abortForTracebacks();
    });
  }
}

std::vector<size_t> WorkerWatch::requestFlightRecorderDumps() {
  // The key first: every NCCL rank of the job, also on other nodes, polls it about once a second, and torch's
  // monitor looks at the key before the pipe in each round and leaves its loop on the key, so a rank that both
  // reach usually dumps once. The pipe reaches the local ranks the key does not (no agent store).
  const bool keySet = setStoreKey_ && setStoreKey_(kDumpStoreKey, dumpKeyValue(dumpSignalRank_));
  std::vector<size_t> asked;
  for (size_t local = 0; local < files_.size(); ++local) {
    if (group_.exit(local) || files_[local].flightRecorder.pipeFile.empty()) continue;
    if (pokeDumpPipe(files_[local].flightRecorder.pipeFile)) asked.push_back(local);
  }
  if (keySet && asked.empty()) {
    spdlog::debug("set {} in the workers' store; no local rank has a flight recorder pipe", kDumpStoreKey);
  }
  return asked;
}

void WorkerWatch::waitForDumps() {
  if (!afterTracebacks_) return;  // a new attempt started meanwhile
  const auto now = clock_.now();
  std::map<size_t, bool> settled;
  bool all = true;
  for (auto& [local, dump] : dumps_) all = (settled[local] = dump.settled(now, kDumpQuiet)) && all;
  if (!all && now < dumpDeadline_) return;  // the next tick looks again
  const auto budget = std::chrono::duration_cast<std::chrono::seconds>(kDumpBudget).count();
  for (const auto& [local, dump] : dumps_) {
    const int rank = group_.globalRank(local);
    if (!dump.written()) {
      spdlog::warn("rank {}: no NCCL flight recorder dump in {} within {} s{}", rank, dump.file(), budget,
                   dump.onlyOlder() ? " (the file there predates this hang: an earlier dump, left as it was)" : "");
      continue;
    }
    hung_[local].flightRecorderDump = dump.file();
    if (settled[local]) {
      spdlog::info(
          "rank {}: NCCL flight recorder dump in {} (read it with python -m "
          "torch.distributed.flight_recorder.fr_trace)",
          rank, dump.file());
    } else {
      spdlog::warn("rank {}: NCCL flight recorder dump in {} was still being written after {} s: it may be cut off",
                   rank, dump.file(), budget);
    }
  }
  dumps_.clear();
  abortForTracebacks();
}

void WorkerWatch::abortForTracebacks() {
  std::vector<size_t> aborted;
  if (settings_.pythonWorkers) {
    for (size_t local = 0; local < files_.size(); ++local) {
      if (!group_.exit(local)) aborted.push_back(local);
    }
  }
  if (!aborted.empty()) {
    spdlog::info(
        "ddprun sends SIGABRT to rank(s) {} for their Python tracebacks (saved with their stacks): the "
        "\"Fatal Python error: Aborted\" that follows is ddprun's doing, not a crash",
        rankList(aborted));
  }
  for (size_t local : aborted) {
    const int fd = ::open(files_[local].stacks.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) continue;
    const std::string header = "\n--- Python tracebacks of every thread (faulthandler, on SIGABRT) ---\n";
    [[maybe_unused]] ssize_t n = ::write(fd, header.data(), header.size());
    group_.abortForTracebacks(local, fd);
  }
  aborted_ = std::move(aborted);
  tracebackDeadline_ = clock_.now() + kStackBudget;
  collecting_ = Collecting::kTracebacks;
  waitForTracebacks();
}

void WorkerWatch::waitForTracebacks() {
  if (!afterTracebacks_) return;  // done, or a new attempt started meanwhile
  // faulthandler writes in microseconds; the wait ends as soon as every aborted worker is gone.
  const bool allGone =
      std::all_of(aborted_.begin(), aborted_.end(), [this](size_t local) { return group_.finished(local); });
  if (!allGone && clock_.now() < tracebackDeadline_) return;  // the next exit or tick looks again
  for (size_t local : aborted_) {
    if (hung_.count(local) == 0) continue;
    const auto text = readUntrustedFile(files_[local].stacks, kMaxStackFileBytes);
    hung_[local].pythonFrame = text ? innermostPythonFrame(*text) : "";
    if (!hung_[local].pythonFrame.empty()) {
      spdlog::info("rank {}: Python main thread in {}", group_.globalRank(local), hung_[local].pythonFrame);
    }
  }
  aborted_.clear();
  collecting_ = Collecting::kNothing;
  auto then = std::move(afterTracebacks_);
  afterTracebacks_ = nullptr;
  then();
}

void WorkerWatch::workerExited() {
  if (collecting_ == Collecting::kTracebacks) waitForTracebacks();
}

void WorkerWatch::pause() { pausedAt_ = clock_.now(); }

void WorkerWatch::resume() {
  if (pausedAt_ == SteadyTime{}) return;
  const auto now = clock_.now();
  monitor_.shiftForPause(pausedAt_, now);
  activity_.shiftForPause(pausedAt_, now);
  pausedAt_ = SteadyTime{};
}

RankProgress WorkerWatch::progress(size_t local) const { return monitor_.progress(local, clock_.now()); }

std::optional<double> WorkerWatch::hangTimeoutSeconds() const { return monitor_.currentTimeoutSeconds(clock_.now()); }

std::vector<WorkerFailure> WorkerWatch::completeRecords(std::vector<WorkerFailure> failures) const {
  for (auto& failure : failures) {
    const auto local = static_cast<size_t>(failure.localRank);
    const auto it = hung_.find(local);
    if (it == hung_.end() || (failure.cause != FailureCause::kHang && failure.cause != FailureCause::kOutputSilence)) {
      continue;
    }
    std::string where = "stacks of every thread: " + it->second.file;
    if (!it->second.nativeFrame.empty()) where += "\nmain thread (native): " + it->second.nativeFrame;
    if (!it->second.pythonFrame.empty()) where += "\nmain thread (Python): " + it->second.pythonFrame;
    if (!it->second.flightRecorderDump.empty()) where += "\nNCCL flight recorder: " + it->second.flightRecorderDump;
    failure.flightRecorderDump = it->second.flightRecorderDump;
    failure.traceback = where;
    failure.stacksFile = it->second.file;
    failure.waitsOnPeers = failure.waitsOnPeers || waitsInCollective(it->second.nativeFrame, it->second.pythonFrame);
    if (local < group_.size() && group_.exit(local)) failure.exit = *group_.exit(local);
  }
  return failures;
}

std::string WorkerWatch::rankList(const std::vector<size_t>& locals) const {
  std::string text;
  for (size_t local : locals) text += (text.empty() ? "" : ", ") + std::to_string(group_.globalRank(local));
  return text;
}

}  // namespace ddprun::launcher
