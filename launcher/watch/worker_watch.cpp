#include "launcher/watch/worker_watch.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace ddprun::launcher {
namespace {

/// Native stacks of every rank together get this long.
constexpr std::chrono::milliseconds kStackBudget{3000};
/// A rank is sampled (/proc) once it has made no progress for this long, at most this often; its Python position, where
/// a look found it running Python in its own code, as often.
constexpr std::chrono::milliseconds kSampleAfter{500};
constexpr std::chrono::milliseconds kSampleEvery{500};
/// A rank in one place, CPU alone, while a peer waits in a collective spins after --hang-spin-timeout, or this many
/// times the longest step, whichever is longer.
constexpr double kSpinStepFactor = 20;
/// A rank that exited 0 is named once it has been gone this long while its peers still run (ranks that end
/// together, as at the end of every job, are not).
constexpr std::chrono::seconds kEarlyExitGrace{1};
/// While a rank spins or works on with its peers waiting in a collective, the line that says so comes again this
/// often: a long computation (or a spin the user left to the busy timeout) is never silent for half an hour.
constexpr std::chrono::seconds kWarnAgainEvery{180};

double secondsBetween(SteadyTime from, SteadyTime to) { return std::chrono::duration<double>(to - from).count(); }

bool contains(const std::vector<size_t>& list, size_t value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

}  // namespace

WorkerWatch::WorkerWatch(boost::asio::io_context& io, const Clock& clock, WorkerGroupView& group,
                         EvidenceSource& evidence, Settings settings, TracebackCollection::StoreKeySetter setStoreKey,
                         HangCallback onHang)
    : clock_(clock),
      group_(group),
      evidence_(evidence),
      settings_(settings),
      onHang_(std::move(onHang)),
      monitor_(settings.hang, settings.straggler),
      collection_(io, clock, group, settings.pythonWorkers, std::move(setStoreKey)) {}

void WorkerWatch::startAttempt(std::vector<RankFiles> files) {
  const uint64_t id = attempt_.id + 1;
  const SteadyTime pausedAt = attempt_.pausedAt;
  attempt_ = {};
  attempt_.files = std::move(files);
  attempt_.id = id;
  attempt_.pausedAt = pausedAt;
  suspicion_ = {};
  collection_.reset(&attempt_.files);
  const auto now = clock_.now();
  monitor_.startAttempt(attempt_.files.size(), now);
  activity_.startAttempt(attempt_.files.size(), now);
}

bool WorkerWatch::rankReplaced(size_t local) {
  const bool endsVerdict = attempt_.verdictGiven;
  ++attempt_.id;  // stacks and samples being taken now describe the group before the replacement
  attempt_.verdictGiven = attempt_.sampling = false;
  attempt_.suspected.clear();
  suspicion_ = {};
  collection_.reset(&attempt_.files);
  const auto now = clock_.now();
  monitor_.regroup(now);
  for (size_t i = 0; i < attempt_.files.size(); ++i) activity_.progressed(i, now);
  if (local < attempt_.files.size()) activity_.forget(local);  // another process: its counters start over
  return endsVerdict;
}

void WorkerWatch::tick() {
  const auto& files = attempt_.files;
  if (attempt_.pausedAt != SteadyTime{} || files.size() != group_.size() || files.empty()) return;
  const auto now = clock_.now();
  observeProgress(now);
  noteEarlyExits(now);
  requestSamples(now);
  monitor_.sampleRates(now);
  warnStragglers(monitor_.stragglers(now));
  collection_.tick();
  if (!attempt_.verdictGiven && !suspicion_.looking) judge(now);
}

void WorkerWatch::observeProgress(SteadyTime now) {
  for (size_t local = 0; local < attempt_.files.size(); ++local) {
    RankObservation seen;
    seen.running = !group_.exit(local).has_value();
    seen.lastOutput = group_.lastOutput(local);
    seen.progress = evidence_.progress(local, attempt_.files[local].progress);
    // A step, or the time ddprun does not read the rank's output (it may wait in write), is no idleness.
    if (monitor_.observe(local, seen, now) || (seen.running && group_.outputHeld(local))) {
      activity_.progressed(local, now);
    }
  }
}

void WorkerWatch::requestSamples(SteadyTime now) {
  // Only where the verdict may need it: an armed job (or one whose attempt has not reported yet), ranks that have
  // gone quiet. Not while ddprun's own stack tool holds the ranks (ptrace stops them: state t, no CPU).
  if (attempt_.sampling || suspicion_.looking) return;
  const bool unreported = settings_.hang.mode != HangSettings::Mode::kOff && !monitor_.attemptReported();
  const auto timeout = monitor_.currentTimeoutSeconds(now);
  if (!settings_.hang.outputTimeoutSeconds && !unreported && !timeout) return;
  const std::vector<size_t> stale = suspicion_.active ? staleRanks(now) : std::vector<size_t>{};
  std::vector<EvidenceSource::SampleTarget> targets;
  for (size_t local = 0; local < attempt_.files.size(); ++local) {
    if (group_.exit(local)) continue;
    const double silent = monitor_.silentSeconds(local, now);
    if (silent < std::chrono::duration<double>(kSampleAfter).count()) continue;
    const SteadyTime last = activity_.lastSample(local);
    if (last != SteadyTime{} && now - last < kSampleEvery && !contains(stale, local)) continue;
    // A collective's traffic matters only for a rank whose last look found it in one; its tree is looked for afresh
    // once a verdict may rest on the sample.
    const auto look = suspicion_.looks.find(local);
    const bool inCollective = look != suspicion_.looks.end() && look->second.thread.inCollective;
    const bool fresh = suspicion_.active || silent >= 0.5 * timeout.value_or(0);
    targets.push_back(
        {local, group_.pid(local), inCollective, suspicion_.wantsPython(local, now, kSampleEvery), fresh});
  }
  if (targets.empty()) return;
  attempt_.sampling = true;
  evidence_.sample(std::move(targets), [this, id = attempt_.id, epoch = attempt_.samplingEpoch](
                                           std::vector<RankSample> samples) { takeSamples(id, epoch, samples); });
}

void WorkerWatch::takeSamples(uint64_t id, uint64_t epoch, const std::vector<RankSample>& samples) {
  if (id != attempt_.id) return;  // a new attempt or a replacement started meanwhile
  attempt_.sampling = false;
  if (epoch != attempt_.samplingEpoch) return;  // a look (ptrace) began meanwhile: these saw ranks it held
  for (const RankSample& sample : samples) {
    if (sample.localRank >= attempt_.files.size()) continue;
    activity_.observe(sample.localRank, sample.counters, sample.at);
    suspicion_.sampledAt[sample.localRank] = sample.at;
    if (!sample.python || !suspicion_.recordPython(sample.localRank, *sample.python, sample.at)) continue;
    if (attempt_.unreadableSaid.insert(sample.localRank).second) {
      spdlog::info(
          "rank {}: its Python position cannot be read ({}), so a spin there is found only by "
          "--hang-busy-timeout",
          group_.globalRank(sample.localRank), sample.python->why);
    }
  }
}

void WorkerWatch::noteEarlyExits(SteadyTime now) {
  std::vector<size_t> running;
  for (size_t local = 0; local < attempt_.files.size(); ++local) {
    const auto& exit = group_.exit(local);
    if (!exit) {
      running.push_back(local);
    } else if (exit->succeeded() && attempt_.earlyExits.count(local) == 0) {
      attempt_.earlyExits[local] = now;
    }
  }
  if (running.empty() || attempt_.earlyExits.empty() || attempt_.earlyExitNamed) return;
  for (const auto& [local, seen] : attempt_.earlyExits) {
    if (now - seen < kEarlyExitGrace) continue;
    attempt_.earlyExitNamed = true;
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
    ++counters_.stragglers;
    spdlog::warn(
        "rank {} is a straggler: over the last {} s it did {:.2f} steps per {} second, the other ranks {:.2f} "
        "(more than {}x faster)",
        group_.globalRank(s.localRank), settings_.straggler.windowSeconds, s.pace, s.byBusyTime ? "busy" : "wall",
        s.othersMedian, settings_.straggler.factor);
  }
}

std::vector<RankEvidence> WorkerWatch::gatherEvidence(const Suspicion& suspicion, SteadyTime now) const {
  const double spinWindow = spinWindowSeconds(suspicion, ruleSettings(suspicion));
  std::vector<RankEvidence> ranks;
  for (size_t local = 0; local < attempt_.files.size(); ++local) {
    RankEvidence rank;
    rank.localRank = local;
    rank.globalRank = group_.globalRank(local);
    const auto& exit = group_.exit(local);
    rank.running = !exit;
    // An exit 0 while peers run is early once they have gone on for a timeout without it; before that they may be
    // finishing a last collective with it (a final barrier, slow on a loaded machine).
    const auto early = attempt_.earlyExits.find(local);
    if (exit && exit->succeeded() && early != attempt_.earlyExits.end()) {
      rank.exitedEarly = secondsBetween(early->second, now) >= suspicion.timeoutSeconds;
      rank.justExited = !rank.exitedEarly;
    }
    rank.idleSeconds = activity_.idleSeconds(local);
    rank.quietSeconds = activity_.quietSeconds(local);
    rank.mainIdleSeconds = activity_.mainIdleSeconds(local);
    rank.ioIdleSeconds = activity_.ioIdleSeconds(local);
    rank.polls = activity_.polls(local, suspicion.timeoutSeconds);
    rank.starved = activity_.starved(local);
    rank.workedShare = activity_.workedShare(local);
    rank.cpuShare = activity_.cpuShare(local);
    rank.waitsForInput = activity_.waitsForInput(local);
    rank.stopped = activity_.stopped(local);
    rank.heldByConsole = group_.outputHeld(local);
    suspicion_.fill(local, suspicion.timeoutSeconds, spinWindow, now, rank);
    ranks.push_back(std::move(rank));
  }
  return ranks;
}

std::vector<size_t> WorkerWatch::staleRanks(SteadyTime now) const {
  std::vector<size_t> stale;
  const double sinceFresh = secondsBetween(suspicion_.freshAfter, now);
  for (size_t local = 0; local < attempt_.files.size(); ++local) {
    if (group_.exit(local) || monitor_.silentSeconds(local, now) < sinceFresh) continue;  // gone, or it stepped since
    const auto sampled = suspicion_.sampledAt.find(local);
    if (sampled == suspicion_.sampledAt.end() || sampled->second < suspicion_.freshAfter) stale.push_back(local);
  }
  return stale;
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
  for (size_t local = 0; local < attempt_.files.size(); ++local) {
    if (!group_.exit(local) && activity_.idleSeconds(local) > found.timeoutSeconds) found.ranks.push_back(local);
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
  rule.spinIsHang = settings_.hang.spinAction == HangSettings::SpinAction::kRestart;
  rule.unreported = suspicion.source == TimeoutSource::kUnreported;
  return rule;
}

void WorkerWatch::judge(SteadyTime now) {
  auto suspicion = monitor_.suspicion(now);
  if (!suspicion) suspicion = unreportedSuspicion(now);
  if (!suspicion) {
    if (suspicion_.active) attempt_.suspected.clear();  // the job moves again
    suspicion_ = {};
    return;
  }
  if (!suspicion_.active) {
    suspicion_.active = true;
    suspicion_.freshAfter = now;
  }
  // No verdict, nor a word, rests on evidence older than the suspicion: a rank not sampled since is sampled first.
  if (!staleRanks(now).empty()) {
    requestSamples(now);
    return;
  }
  const auto evidence = gatherEvidence(*suspicion, now);
  const RuleSettings rule = ruleSettings(*suspicion);
  const Judgement judgement = judgeHang(*suspicion, evidence, rule);
  switch (judgement.verdict) {
    case Verdict::kNeedStacks: lookAtStacks(); return;
    case Verdict::kNothingRuns: return;
    case Verdict::kHung: declareHang(*suspicion, evidence, judgement, rule); return;
    default: explain(*suspicion, evidence, judgement, rule, now); return;
  }
}

void WorkerWatch::explain(const Suspicion& suspicion, const std::vector<RankEvidence>& evidence,
                          const Judgement& judgement, const RuleSettings& rule, SteadyTime now) {
  const bool spins = judgement.verdict == Verdict::kSpinning;
  const bool newSpin = spins && !suspicion_.spinReported;
  const bool othersWait = spins || (judgement.verdict == Verdict::kWorking && !judgement.waiting.empty());
  const bool again = othersWait && now - suspicion_.warnedAt >= kWarnAgainEvery;
  if (suspicion_.explained && !newSpin && !again) return;
  if (newSpin) counters_.spins += judgement.spinning.size();
  suspicion_.spinReported = suspicion_.spinReported || spins;
  for (size_t i : judgement.spinning) {
    const RankEvidence& rank = evidence[i];
    attempt_.suspected[rank.localRank] =
        "spins in one place? (" + (rank.python.where.empty() ? describe(*rank.mainThread) : rank.python.where) + ")";
  }
  // A job that has not reported in this attempt (perhaps never will) hears of work only at debug level; a spin, or
  // a rank working on while its peers wait, is a warning (its stacks are in its stacks file).
  const auto level = spins || (othersWait && suspicion_.explained) ? spdlog::level::warn
                     : rule.unreported                             ? spdlog::level::debug
                                                                   : spdlog::level::info;
  spdlog::log(level, "{}", describeWorking(suspicion, evidence, judgement, rule));
  for (size_t i : judgement.spinning) {
    spdlog::warn("rank {}: stacks in {}", evidence[i].globalRank, attempt_.files[evidence[i].localRank].stacks);
  }
  suspicion_.explained = true;
  suspicion_.warnedAt = now;
}

void WorkerWatch::lookAtStacks() {
  // Every running rank's stacks: the verdict needs to know which main threads wait in a collective.
  std::vector<EvidenceSource::StackTarget> targets;
  for (size_t local = 0; local < attempt_.files.size(); ++local) {
    if (!group_.exit(local)) targets.push_back({local, group_.pid(local), attempt_.files[local].stacks});
  }
  if (targets.empty()) return;
  suspicion_.looking = true;
  ++attempt_.samplingEpoch;
  const auto started = clock_.now();
  evidence_.collectStacks(std::move(targets), kStackBudget,
                          [this, id = attempt_.id, started](std::vector<RankStacks> stacks) {
                            if (id != attempt_.id) return;  // a new attempt started meanwhile
                            suspicion_.looking = false;
                            const auto now = clock_.now();
                            // The look held the ranks (ptrace) and took no samples: its time is ddprun's, not the
                            // ranks' idleness (on a loaded machine a look takes seconds, longer than the floor).
                            activity_.shiftForPause(started, now);
                            suspicion_.freshAfter = now;
                            for (const auto& saved : stacks)
                              suspicion_.recordStacks(saved.localRank, saved.thread, now);
                            spdlog::debug("native stacks of {} rank(s) saved in {:.0f} ms", stacks.size(),
                                          std::chrono::duration<double, std::milli>(now - started).count());
                            if (!attempt_.verdictGiven) judge(now);
                          });
}

void WorkerWatch::declareHang(const Suspicion& suspicion, const std::vector<RankEvidence>& evidence,
                              const Judgement& judgement, const RuleSettings& rule) {
  attempt_.verdictGiven = true;
  ++counters_.hangs;
  spdlog::error("hang: {}", describeHang(suspicion, evidence, judgement, rule));
  if (const std::string hint = hangHint(suspicion); !hint.empty()) spdlog::warn("{}", hint);
  const int culprit = judgement.culprits.empty() ? -1 : evidence[judgement.culprits.front()].globalRank;
  std::vector<size_t> hungRanks;
  std::vector<WorkerFailure> failures;
  for (size_t i = 0; i < evidence.size(); ++i) {
    const RankEvidence& rank = evidence[i];
    if (!rank.running) continue;
    const size_t local = rank.localRank;
    hungRanks.push_back(local);
    WorkerFailure failure;
    failure.globalRank = rank.globalRank;
    failure.localRank = static_cast<int>(local);
    failure.pid = group_.pid(local);
    failure.cause = suspicion.source == TimeoutSource::kOutput ? FailureCause::kOutputSilence : FailureCause::kHang;
    failure.exit.when = std::chrono::system_clock::now();
    failure.timestamp = std::chrono::duration_cast<std::chrono::seconds>(failure.exit.when.time_since_epoch()).count();
    failure.order = failure.exit.when;
    failure.waitsOnPeers = !contains(judgement.culprits, i);
    failure.stacksFile = attempt_.files[local].stacks;
    failure.message = "hang: no progress for " + std::to_string(static_cast<int>(suspicion.stalledSeconds)) + " s" +
                      (suspicion.lastStep ? " after step " + std::to_string(*suspicion.lastStep) : "") + "; " +
                      (contains(judgement.spinning, i)
                           ? "rank " + std::to_string(rank.globalRank) + " spins in one place (" +
                                 (rank.python.where.empty() ? describe(*rank.mainThread) : rank.python.where) + ")"
                           : describeRank(rank, suspicion.timeoutSeconds));
    failures.push_back(std::move(failure));
    const std::string nativeFrame = rank.mainThread ? rank.mainThread->frame : "";
    collection_.noteHung(local, nativeFrame, culprit);
    if (!nativeFrame.empty()) {
      spdlog::info("rank {}: stacks in {}; main thread in {}", rank.globalRank, attempt_.files[local].stacks,
                   nativeFrame);
    }
  }
  monitor_.markHung(hungRanks);
  std::vector<size_t> culprits;
  for (size_t i : judgement.culprits) culprits.push_back(evidence[i].localRank);
  if (!culprits.empty() && culprits.size() < evidence.size()) {
    spdlog::warn("likely cause of the hang: rank {}", rankList(culprits));
  }
  onHang_(std::move(failures));
}

void WorkerWatch::saveTracebacksThen(std::function<void()> then) { collection_.start(std::move(then)); }

void WorkerWatch::pause() { attempt_.pausedAt = clock_.now(); }

void WorkerWatch::resume() {
  if (attempt_.pausedAt == SteadyTime{}) return;
  const auto now = clock_.now();
  monitor_.shiftForPause(attempt_.pausedAt, now);
  activity_.shiftForPause(attempt_.pausedAt, now);
  attempt_.pausedAt = SteadyTime{};
}

RankProgress WorkerWatch::progress(size_t local) const {
  RankProgress progress = monitor_.progress(local, clock_.now());
  const auto suspected = attempt_.suspected.find(local);
  if (suspected != attempt_.suspected.end()) progress.suspected = suspected->second;
  return progress;
}

std::optional<double> WorkerWatch::hangTimeoutSeconds() const { return monitor_.currentTimeoutSeconds(clock_.now()); }

std::vector<WorkerFailure> WorkerWatch::completeRecords(std::vector<WorkerFailure> failures) const {
  return collection_.complete(std::move(failures));
}

std::string WorkerWatch::rankList(const std::vector<size_t>& locals) const {
  std::string text;
  for (size_t local : locals) text += (text.empty() ? "" : ", ") + std::to_string(group_.globalRank(local));
  return text;
}

}  // namespace ddprun::launcher
