// The agent's part of rank replacement (--restart-scope rank): whether the job can use it, and carrying out the
// policy's replaceWorker: the announcement in the workers' store, the new process in the failed rank's place, and
// the watch for the new generation's formation. The protocol: common/rank_replacement_keys.hpp and
// worker/rank_replacement.hpp; the rules: AgentPolicy::replaceInPlace.
#include <spdlog/spdlog.h>

#include <chrono>

#include "common/clock.hpp"
#include "common/elf_section.hpp"
#include "common/rank_replacement_keys.hpp"
#include "launcher/agent.hpp"
#include "launcher/process/process_spawn.hpp"
#include "launcher/process/spare_rank.hpp"
#include "launcher/workers_store.hpp"

namespace ddprun::launcher {
namespace asio = boost::asio;

bool Agent::rankReplacementUsable() const {
  if (config_.restartScope != RestartScope::kRank) return false;
  std::string why;
  const std::string program = resolveProgram(spec_.command[0]);
  if (!config_.pythonInterpreter.empty() || program.empty() || !hasElfSection(program, kRankReplaceSection)) {
    why = spec_.command[0] + " does not support it (no " + kRankReplaceSection + " section; docs/launcher.md)";
  } else if (!config_.useAgentStore) {
    why = "with --no-agent-store rank 0's process holds the workers' store";
  }
  if (why.empty()) return true;
  spdlog::warn("--restart-scope rank: {}; a failed rank restarts the whole group", why);
  return false;
}

WorkersStore& Agent::workersStore() {
  if (!workersStore_) {
    const auto& round = round_ ? *round_ : singleNodeRound();
    // Every node of a dynamic job starts a store for each round; the workers use group rank 0's.
    store::StoreServer* own = roundStore_.server();
    if (own != nullptr && (config_.mode != RendezvousMode::kDynamic || round.groupRank == 0)) {
      workersStore_ = servedWorkersStore(*own);
    } else {
      // Another node's agent serves the round's store: one short request at a time.
      workersStore_ = remoteWorkersStore(round.masterAddr, round.masterPort, std::chrono::seconds(2));
    }
  }
  return *workersStore_;
}

std::string Agent::replaceWorker(const WorkerExitEvent& event) {
  const std::string mine = rendezvousId_ + " rank " + std::to_string(event.globalRank);
  int generation = 0;
  try {
    WorkersStore& store = workersStore();
    // One replacement at a time in the whole job, whichever node's rank failed.
    const std::string holder = store.compareSet(attemptKey(attempt_, kReplacingKey), "", mine);
    if (holder != mine) return "another replacement is forming (" + holder + ")";
    generation = static_cast<int>(store.add(attemptKey(attempt_, kGenerationCounterKey), 1));
    // The survivors wait for this key; without it they would wait for nothing.
    store.set(attemptKey(attempt_, generationKey(generation)), std::to_string(event.globalRank));
  } catch (const std::exception& e) {
    return std::string("the workers' store did not answer (") + e.what() + ")";
  }
  commGeneration_ = generation;
  replacingAs_ = mine;
  history_->rankReplaced(watch_.completeRecords({event.failure}).front(), generation);
  if (watch_.rankReplaced(static_cast<size_t>(event.localRank))) {
    // The hang's dump request must not make the next generation's NCCL ranks dump over the files it left.
    try {
      workersStore().erase(kDumpStoreKey);
    } catch (const std::exception& e) {
      spdlog::warn("could not delete {} from the workers' store: {}", kDumpStoreKey, e.what());
    }
  }
  // Posted: this runs inside the failed worker's exit handler, and the start takes its place.
  asio::post(io_, [this, local = event.localRank, generation] { startReplacement(local, generation); });
  return "";
}

void Agent::startReplacement(int local, int generation) {
  if (policy_.state() != AgentState::kRunning || generation != commGeneration_) return;  // overtaken
  const auto& round = round_ ? *round_ : singleNodeRound();
  WorkerGroup::Member member = std::move(membersFor(round, attempt_)[static_cast<size_t>(local)]);
  member.launch.env["DDPRUN_COMM_GENERATION"] = std::to_string(generation);
  member.launch.spare = spare_.get();  // claimed when one waits: no fork, no start-up on the failure's path
  // The replaced rank's own files stay as it left them: the new process writes beside them.
  const std::string suffix = ".generation_" + std::to_string(generation);
  member.errorFile += suffix;
  member.launch.env["TORCHELASTIC_ERROR_FILE"] = member.errorFile;
  if (!member.launch.output.stdoutFile.empty()) member.launch.output.stdoutFile += suffix;
  if (!member.launch.output.stderrFile.empty()) member.launch.output.stderrFile += suffix;
  const pid_t before = group_.pid(static_cast<size_t>(local));
  try {
    group_.replace(static_cast<size_t>(local), std::move(member));
  } catch (const std::exception& e) {
    spdlog::error("could not start the replacement of local rank {}: {}", local, e.what());
    WorkerFailure failure;
    failure.globalRank = group_.globalRank(static_cast<size_t>(local));
    failure.localRank = local;
    failure.message = e.what();
    policy_.onReplacementFailed(failure);
    return;
  }
  const pid_t after = group_.pid(static_cast<size_t>(local));
  spdlog::info(
      "rank {}: pid {} replaced by pid {}{} in communicator generation {}, {:.1f} ms after the failure was seen",
      group_.globalRank(static_cast<size_t>(local)), before, after,
      spare_ && spare_->lastClaimed() == after ? " (the spare rank)" : "", generation, millisecondsSince(failureSeen_));
  watchGenerationFormed(generation);
}

void Agent::watchGenerationFormed(int generation) {
  formedTimer_.expires_after(std::chrono::milliseconds(5));
  formedTimer_.async_wait([this, generation](const boost::system::error_code& ec) {
    if (ec || generation != commGeneration_ || policy_.state() != AgentState::kRunning) return;
    try {
      WorkersStore& store = workersStore();
      if (!store.get(attemptKey(attempt_, generationFormedKey(generation)))) {
        watchGenerationFormed(generation);
        return;
      }
      store.compareSet(attemptKey(attempt_, kReplacingKey), replacingAs_, "");  // the next one may start
    } catch (const std::exception& e) {
      spdlog::debug("the workers' store did not answer ({}); looking again", e.what());
      watchGenerationFormed(generation);
      return;
    }
    spdlog::info(
        "communicator generation {} formed: training goes on with the replacement, {:.1f} ms after the "
        "failure was seen",
        generation, millisecondsSince(failureSeen_));
    history_->replacementFormed(generation);
    policy_.onReplacementFormed();
    prepareSpareAfter(std::chrono::seconds(1));  // the next failure's, once the new rank is past its first steps
  });
}

}  // namespace ddprun::launcher
