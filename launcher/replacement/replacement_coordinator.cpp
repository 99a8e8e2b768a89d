#include "launcher/replacement/replacement_coordinator.hpp"

#include <spdlog/spdlog.h>

#include "common/elf_section.hpp"
#include "common/rank_replacement_keys.hpp"
#include "launcher/process/process_spawn.hpp"
#include "launcher/replacement/replacement_protocol.hpp"
#include "launcher/watch/evidence/flight_recorder.hpp"
#include "store/served_store.hpp"
#include "store/store_client.hpp"

namespace ddprun::launcher {
namespace asio = boost::asio;
namespace {

constexpr std::chrono::seconds kStoreTimeout{2};
/// One WAIT for "formed": short, so a superseded generation or a key to set waits at most this long.
constexpr std::chrono::milliseconds kFormedSlice{200};

}  // namespace

ReplacementCoordinator::ReplacementCoordinator(asio::io_context& io, Parts parts, std::string holder, bool agentStore,
                                               StoreLane::Connect connect)
    : io_(io), parts_(parts), holder_(std::move(holder)), agentStore_(agentStore), connect_(std::move(connect)) {}

bool ReplacementCoordinator::usable(const LaunchPlan& config, const WorkerSpec& spec) {
  if (config.restartScope != RestartScope::kRank) return false;
  std::string why;
  const std::string program = resolveProgram(spec.command[0]);
  if (!config.pythonInterpreter.empty() || program.empty() || !hasElfSection(program, kRankReplaceSection)) {
    why = spec.command[0] + " does not support it (no " + kRankReplaceSection + " section; docs/launcher.md)";
  } else if (!config.useAgentStore) {
    why = "with --no-agent-store rank 0's process holds the workers' store";
  }
  if (why.empty()) return true;
  spdlog::warn("--restart-scope rank: {}; a failed rank restarts the whole group", why);
  return false;
}

StoreLane& ReplacementCoordinator::lane() {
  if (!lane_) {
    lane_ = std::make_unique<StoreLane>(io_);
    lane_->retarget(attemptConnect_);
  }
  return *lane_;
}

void ReplacementCoordinator::startAttempt(const rendezvous::RoundAssignment& round, int attempt,
                                          store::StoreServer* served) {
  round_ = round;
  attempt_ = attempt;
  served_ = served;
  generation_->store(0);
  attemptConnect_ = connect_;
  if (!attemptConnect_) {
    attemptConnect_ = [host = round.masterAddr, port = round.masterPort](const CancelFlag& cancel) {
      return std::make_unique<store::StoreClient>(host, static_cast<uint16_t>(port), kStoreTimeout, kStoreTimeout,
                                                  &cancel);
    };
  }
  if (lane_) lane_->retarget(attemptConnect_);  // else made at first use: a job that never needs it has no thread
  // Connected now, off the failure's path: a replacement's claim then costs three round trips, not a connect too.
  if (parts_.policy.replacesRanks()) lane().run([](store::Store&) {});
}

void ReplacementCoordinator::replace(const WorkerExitEvent& event) {
  const std::string holder = holder_ + " rank " + std::to_string(event.globalRank);
  if (served_ != nullptr) {
    // This agent serves the workers' store: the claim is three operations on its own state, on this loop, which
    // never wait (ServedStore). Answered on the next turn of the loop, as the policy expects.
    store::ServedStore store(*served_);
    ReplacementClaim claim;
    std::string error;
    try {
      claim = claimReplacement(store, attempt_, holder, event.globalRank);
    } catch (const std::exception& e) {
      error = e.what();
    }
    asio::post(io_, [this, claim, event, holder, error] {
      holding_ = holder;
      claimed(event, claim.generation, error.empty() ? claim.refusal : "the workers' store refused (" + error + ")");
    });
    return;
  }
  // Another node's agent serves it: over TCP, on the lane.
  auto claim = std::make_shared<ReplacementClaim>();
  lane().run([claim, attempt = attempt_, holder, rank = event.globalRank](
                 store::Store& store) { *claim = claimReplacement(store, attempt, holder, rank); },
             [this, claim, event, holder](const std::string& error) {
               holding_ = holder;
               claimed(event, claim->generation,
                       error.empty() ? claim->refusal : "the workers' store did not answer (" + error + ")");
             });
}

void ReplacementCoordinator::claimed(const WorkerExitEvent& event, int generation, const std::string& refusal) {
  if (!refusal.empty()) {
    parts_.policy.onReplacementRefused(refusal);
    return;
  }
  if (!parts_.policy.onReplacementClaimed()) return;  // the group stopped meanwhile
  generation_->store(generation);
  parts_.history.rankReplaced(parts_.watch.completeRecords({event.failure}).front(), generation);
  // The hang's dump request must not make the next generation's NCCL ranks dump over the files it left.
  const bool endedAHang = parts_.watch.rankReplaced(static_cast<size_t>(event.localRank));
  if (endedAHang && served_ != nullptr) {
    store::ServedStore(*served_).erase(kDumpStoreKey);
  } else if (endedAHang) {
    lane().run([](store::Store& store) { store.erase(kDumpStoreKey); },
               [](const std::string& error) {
                 if (!error.empty())
                   spdlog::warn("could not delete {} from the workers' store: {}", kDumpStoreKey, error);
               });
  }
  start(event.localRank, generation);
}

void ReplacementCoordinator::start(int local, int generation) {
  WorkerGroup& group = parts_.group;
  WorkerGroup::Member member = parts_.plan.member(round_, {attempt_, generation}, local);
  member.launch.spare = parts_.starts.spare();  // claimed when one waits: no fork, no start-up on the failure's path
  const pid_t before = group.pid(static_cast<size_t>(local));
  try {
    group.replace(static_cast<size_t>(local), std::move(member));
  } catch (const std::exception& e) {
    spdlog::error("could not start the replacement of local rank {}: {}", local, e.what());
    WorkerFailure failure;
    failure.globalRank = group.globalRank(static_cast<size_t>(local));
    failure.localRank = local;
    failure.message = e.what();
    generation_->store(0);
    parts_.policy.onReplacementFailed(failure);
    return;
  }
  const pid_t after = group.pid(static_cast<size_t>(local));
  const SpareRank* spare = parts_.starts.spare();
  spdlog::info(
      "rank {}: pid {} replaced by pid {}{} in communicator generation {}, {:.1f} ms after the failure was seen",
      group.globalRank(static_cast<size_t>(local)), before, after,
      spare && spare->lastClaimed() == after ? " (the spare rank)" : "", generation, parts_.history.msSinceSign());
  awaitFormed(generation);
}

void ReplacementCoordinator::awaitFormed(int generation) {
  auto formed = std::make_shared<bool>(false);
  lane().run(
      [formed, attempt = attempt_, generation, holder = holding_, wanted = generation_](store::Store& store) {
        *formed = launcher::awaitFormed(store, attempt, generation, holder, kFormedSlice, *wanted);
      },
      [this, formed, generation](const std::string& error) {
        if (generation_->load() != generation || parts_.policy.state() != AgentState::kRunning) return;
        if (!error.empty()) {
          spdlog::debug("the workers' store did not answer ({}); waiting again", error);
          awaitFormed(generation);
          return;
        }
        if (!*formed) return;
        generation_->store(0);
        spdlog::info(
            "communicator generation {} formed: training goes on with the replacement, {:.1f} ms after the failure "
            "was seen",
            generation, parts_.history.msSinceSign());
        parts_.history.replacementFormed(generation);
        parts_.policy.onReplacementFormed();
        parts_.starts.prepareSpareAfter(
            std::chrono::seconds(1),  // the next failure's, once the new rank is past its
            [this] { return parts_.policy.state() == AgentState::kRunning; });  // first steps
      });
}

bool ReplacementCoordinator::setKey(const std::string& key, const std::string& value) {
  if (!agentStore_) return false;  // rank 0's own process serves the workers' store: nothing to write into
  if (served_ != nullptr) {
    store::ServedStore(*served_).set(key, value);  // on the loop, atomic with every client's request
    return true;
  }
  lane().run([key, value](store::Store& store) { store.set(key, value); },
             [key](const std::string& error) {
               if (!error.empty()) spdlog::warn("could not write {} into the workers' store: {}", key, error);
             });
  return true;
}

}  // namespace ddprun::launcher
