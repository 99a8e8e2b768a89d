#include "launcher/worker_group.hpp"

#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>

#include "common/atomic_file.hpp"
#include "common/error.hpp"

namespace ddprun::launcher {

WorkerGroup::WorkerGroup(boost::asio::io_context& io, ChildReaper& reaper, std::chrono::duration<double> stopTimeout,
                         ExitCallback onExit)
    : io_(io), reaper_(reaper), stopTimeout_(stopTimeout), onExit_(std::move(onExit)), killTimer_(io), holdTimer_(io) {}

WorkerGroup::~WorkerGroup() { killTimer_.cancel(); }  // each WorkerProcess kills its own group if still running

void WorkerGroup::start(std::vector<Member> members) {
  // The guardian first (it starts with the first worker): should it fail to start, no worker runs unguarded.
  if (guard_ != nullptr) guard_->start();
  killTimer_.cancel();
  holdTimer_.cancel();
  held_.clear();
  holding_ = false;
  ++generation_;  // a kill timer of the previous attempt that is already due must not touch this one
  stopSignal_ = 0;
  signalled_ = false;
  startedAt_ = std::chrono::steady_clock::now();
  slots_.clear();
  replaced_.clear();
  slots_.reserve(members.size());
  for (auto& member : members) {
    Slot slot;
    slot.member = std::move(member);
    slots_.push_back(std::move(slot));
  }
  for (size_t local = 0; local < slots_.size(); ++local) {
    Slot& slot = slots_[local];
    try {
      slot.process = std::make_unique<WorkerProcess>(io_, reaper_, slot.member.launch,
                                                     [this, local](const WorkerExit& exit) { onExit(local, exit); });
    } catch (...) {
      slots_.clear();  // the ones already started are killed with their WorkerProcess
      throw;
    }
    if (guard_ != nullptr) guard_->track(slot.process->pid());
  }
}

void WorkerGroup::replace(size_t local, Member member) {
  Slot& slot = slots_.at(local);
  if (!slot.exit) throw Error("local rank " + std::to_string(local) + " is still running; it cannot be replaced");
  auto process = std::make_unique<WorkerProcess>(io_, reaper_, member.launch,
                                                 [this, local](const WorkerExit& exit) { onExit(local, exit); });
  if (guard_ != nullptr) guard_->track(process->pid());
  replaced_.push_back(std::move(slot.process));
  slot.process = std::move(process);
  slot.member = std::move(member);
  slot.exit.reset();
  slot.exitedBeforeStop = false;
  slot.signalsSent.clear();
}

bool WorkerGroup::allExited() const {
  return std::all_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.exit.has_value(); });
}

bool WorkerGroup::outputEnded() const {
  return std::all_of(slots_.begin(), slots_.end(),
                     [](const Slot& s) { return s.process == nullptr || s.process->outputEnded(); });
}

void WorkerGroup::addOutputHints(std::vector<WorkerFailure>& failures, bool agentStore) const {
  if (!agentStore) return;
  for (auto& failure : failures) {
    const auto local = static_cast<size_t>(failure.localRank);
    if (local >= slots_.size() || !slots_[local].process || !slots_[local].process->sawAddressInUse()) continue;
    if (slots_[local].process->pid() != failure.pid) continue;  // a replaced rank's record
    failure.hint =
        "its stderr says an address was already in use: ddprun's agent store listens on MASTER_PORT, so a script "
        "whose rank 0 starts its own TCPStore there cannot bind it; run ddprun with --no-agent-store (torch 1.13), "
        "or connect with TCPStore(is_master=False) as torch 2.x's TORCHELASTIC_USE_AGENT_STORE asks";
  }
}

bool WorkerGroup::outputWaitsForConsole() const {
  return std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.process && s.process->outputHeld(); });
}

pid_t WorkerGroup::pid(size_t local) const { return slots_[local].process ? slots_[local].process->pid() : -1; }

std::chrono::steady_clock::time_point WorkerGroup::lastOutput(size_t local) const {
  return slots_[local].process ? slots_[local].process->lastOutput() : std::chrono::steady_clock::time_point{};
}

bool WorkerGroup::stoppedByUs(const Slot& slot, const WorkerExit& exit) const {
  if (slot.signalsSent.empty() || exit.succeeded()) return false;
  if (slot.exitedBeforeStop) return false;                                          // dead before the signal was sent
  if (errorFileWrittenBefore(slot.member.errorFile, firstSignalAt_)) return false;  // its own error, in time
  return slot.signalsSent.count(exit.signal) > 0;                                   // else an error exit of its own
}

void WorkerGroup::send(Slot& slot, int signal, bool wholeGroup) {
  if (!signalled_) {
    signalled_ = true;
    // Which workers were already dead (their exits not yet processed) when ddprun's first signal went
    // out: they failed on their own, whatever the order in which their exits reach us.
    for (auto& each : slots_) each.exitedBeforeStop = !each.exit && each.process->exitPending();
    firstSignalAt_ = std::chrono::system_clock::now();
  }
  slot.signalsSent.insert(signal);
  if (wholeGroup) {
    slot.process->signalGroup(signal);  // an exited worker's leftovers too
  } else if (!slot.exit) {
    ::kill(slot.process->pid(), signal);
  }
}

void WorkerGroup::onExit(size_t local, const WorkerExit& exit) {
  Slot& slot = slots_[local];
  slot.exit = exit;
  // The worker is reaped; its group may live on (grandchildren), so a later SIGKILL to ddprun must still
  // reach it: keep it tracked unless the whole group is gone.
  if (guard_ != nullptr && !slot.process->groupAlive()) guard_->untrack(slot.process->pid());
  WorkerExitEvent event;
  event.localRank = slot.member.localRank;
  event.globalRank = slot.member.globalRank;
  event.exit = exit;
  event.stoppedByUs = stoppedByUs(slot, exit);
  // Also for an exit 0: while others still run, it is an early exit the policy may need to name.
  event.failure = describeFailure(slot.member.globalRank, slot.member.localRank, slot.process->pid(), exit,
                                  slot.member.errorFile, exit.succeeded() ? "" : slot.process->stderrTail());
  if (event.failure.fromStderr && !event.stoppedByUs) saveStderrTail(slot, event.failure);
  const bool all = allExited();
  if (all) killLeftovers();
  const bool early = std::chrono::steady_clock::now() - startedAt_ < kStartupWindow;
  if (!holding_ && !all && !exit.succeeded() && stopSignal_ == 0 && early) {
    holding_ = true;
    holdTimer_.expires_after(kStartupHold);
    holdTimer_.async_wait([this, generation = generation_](const boost::system::error_code& ec) {
      if (!ec && generation == generation_) releaseHeld();
    });
  }
  if (holding_) {
    held_.push_back(event);
    if (all) releaseHeld();
    return;
  }
  onExit_(event, all);
}

void WorkerGroup::saveStderrTail(const Slot& slot, WorkerFailure& failure) const {
  if (slot.member.errorFile.empty()) return;
  const std::string path = std::filesystem::path(slot.member.errorFile).replace_filename(kStderrTailFile).string();
  try {
    writeFileAtomically(path, failure.traceback);
    failure.stderrTailFile = path;
  } catch (const std::exception& e) {
    spdlog::warn("cannot save the end of rank {}'s stderr: {}", failure.globalRank, e.what());
  }
}

void WorkerGroup::releaseHeld() {
  holding_ = false;
  holdTimer_.cancel();
  auto events = std::move(held_);
  held_.clear();
  for (size_t i = 0; i < events.size(); ++i) onExit_(events[i], i + 1 == events.size() && allExited());
}

void WorkerGroup::killLeftovers() {
  killTimer_.cancel();
  // Every worker has exited; whatever they started in their groups goes too, before anything new starts.
  for (auto& slot : slots_) {
    if (slot.process->groupAlive()) slot.process->signalGroup(SIGKILL);
    if (guard_ != nullptr) guard_->untrack(slot.process->pid());
  }
}

void WorkerGroup::stop(int signal) {
  stopSignal_ = signal;
  for (auto& slot : slots_) send(slot, signal);
  // A stopped worker (kill -STOP, a debugger's stop) would act on the signal only once continued: without this
  // the stop waits its whole timeout for it.
  if (signal != SIGKILL && signal != SIGCONT) {
    for (auto& slot : slots_) {
      if (!slot.exit) slot.process->signalGroup(SIGCONT);
    }
  }
  if (!allExited()) armKillTimer();
}

void WorkerGroup::abortForTracebacks(size_t local, int fd) {
  Slot& slot = slots_[local];
  slot.process->copyStderrTo(fd);
  send(slot, SIGABRT, /*wholeGroup=*/false);
}

void WorkerGroup::armKillTimer() {
  killTimer_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(stopTimeout_));
  killTimer_.async_wait([this, generation = generation_](const boost::system::error_code& ec) {
    if (ec || generation != generation_) return;
    for (auto& slot : slots_) {
      if (slot.exit) continue;
      spdlog::warn("rank {} did not stop within {} s of {}; sending SIGKILL", slot.member.globalRank,
                   stopTimeout_.count(), signalName(stopSignal_));
      send(slot, SIGKILL);
    }
  });
}

void WorkerGroup::kill() {
  for (auto& slot : slots_) {
    if (!slot.exit) send(slot, SIGKILL);
  }
}

void WorkerGroup::kill(size_t local) {
  Slot& slot = slots_.at(local);
  if (slot.exit) return;
  // Not through send(): this is no stop of the group, and a later stop must still note who was dead before it.
  slot.signalsSent.insert(SIGKILL);
  slot.process->signalGroup(SIGKILL);
}

void WorkerGroup::signalAll(int signal) {
  for (auto& slot : slots_) {
    if (!slot.exit) slot.process->signalGroup(signal);
  }
}

void WorkerGroup::suspend() {
  for (auto& slot : slots_) {
    if (!slot.exit) slot.process->signalGroup(SIGSTOP);
  }
}

void WorkerGroup::resume() {
  for (auto& slot : slots_) {
    if (!slot.exit) slot.process->signalGroup(SIGCONT);
  }
}

void WorkerGroup::resize(int terminal) {
  for (auto& slot : slots_) {
    if (slot.process) slot.process->updateWindowSize(terminal);
  }
}

std::string WorkerGroup::takeUnshownOutput() {
  std::string text;
  for (auto& slot : slots_) {
    if (slot.process) text += slot.process->takeUnshownOutput();
  }
  return text;
}

}  // namespace ddprun::launcher
