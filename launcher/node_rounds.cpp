#include "launcher/node_rounds.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <thread>

#include "launcher/config/local_host.hpp"

namespace ddprun::launcher {
namespace asio = boost::asio;
namespace {

RoundStoreSettings roundStoreSettings(const LaunchPlan& plan) {
  return {plan.mode, plan.standalone, plan.masterAddr, plan.masterPort, plan.useAgentStore, plan.localAddr};
}

SessionSettings sessionSettings(const LaunchPlan& plan) {
  return {plan.mode,     plan.rdzvBackend, plan.rdzvHost, plan.rdzvPort,   plan.rdzvId,     plan.rdzv,
          plan.minNodes, plan.maxNodes,    plan.nodeRank, plan.masterAddr, plan.masterPort, plan.localAddr};
}

/// "3" or "4-7": the global ranks `first` .. first + count - 1.
std::string rankRange(int first, int count) {
  return count <= 1 ? std::to_string(first) : std::to_string(first) + "-" + std::to_string(first + count - 1);
}

std::string describeRound(const rendezvous::RoundAssignment& round, int nproc) {
  return "round " + std::to_string(round.round) + ": group rank " + std::to_string(round.groupRank) + " of " +
         std::to_string(round.groupWorldSize) + ", ranks " + rankRange(round.rankOffset, nproc) + ", world size " +
         std::to_string(round.worldSize) + ", MASTER_ADDR=" + round.masterAddr +
         " MASTER_PORT=" + std::to_string(round.masterPort);
}

rendezvous::NodeOutcome outcomeOf(NodeEnd end) {
  switch (end) {
    case NodeEnd::kSucceeded: return rendezvous::NodeOutcome::kSucceeded;
    case NodeEnd::kStopped: return rendezvous::NodeOutcome::kStopped;
    case NodeEnd::kFailed:
    case NodeEnd::kAbandoned: return rendezvous::NodeOutcome::kFailed;
  }
  return rendezvous::NodeOutcome::kFailed;
}

/// Within the membership window after a failure, checked every 20 ms: the node's watcher ends the round for it as
/// soon as it sees the gone mark.
MembershipVerdict confirmOnThread(rendezvous::RendezvousHandler& handler) {
  const auto until = std::chrono::steady_clock::now() + handler.nodeLossSeenWithin();
  handler.expectChange();
  while (std::chrono::steady_clock::now() < until) {
    const auto membership = handler.check();
    if (membership == rendezvous::Membership::kBackendUnreachable) return MembershipVerdict::kStoreUnreachable;
    if (membership != rendezvous::Membership::kStable) return MembershipVerdict::kRoundChanged;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return MembershipVerdict::kUnchanged;
}

}  // namespace

NodeRounds::NodeRounds(asio::io_context& io, const LaunchPlan& config)
    : io_(io), config_(config), store_(io, roundStoreSettings(config)) {
  if (config.mode != RendezvousMode::kSingleNode)
    session_ = std::make_unique<RendezvousSession>(sessionSettings(config));
}

NodeRounds::~NodeRounds() = default;

void NodeRounds::startFixedStore() {
  if (config_.mode == RendezvousMode::kSingleNode ||
      (config_.mode == RendezvousMode::kStatic && config_.nodeRank == 0)) {
    store_.startFixed();
  }
}

void NodeRounds::join(std::function<void()> onRound, std::function<void(const std::string&)> onFail) {
  rendezvous::NodeDescriptor self;
  self.addr = config_.localAddr.empty() ? hostName() : config_.localAddr;
  self.id = self.addr + "_" + std::to_string(::getpid());
  self.nproc = config_.nproc;
  if (config_.mode == RendezvousMode::kDynamic) {
    self.storeAddr = self.addr;  // where the other nodes reach this node
    self.storePort = store_.startForRound();
  }
  auto fail = [this, onFail](const std::string& message) { asio::post(io_, [onFail, message] { onFail(message); }); };
  session_->post(
      [this, self, onRound, fail](rendezvous::RendezvousHandler& handler) {
        try {
          auto round = handler.next(self, session_->cancelFlag());
          session_->noteNextCheck(handler);  // a new round is checked at once
          asio::post(io_, [this, round, onRound] {
            spdlog::info("{}", describeRound(round, config_.nproc));
            round_ = round;
            onRound();
          });
        } catch (const rendezvous::RendezvousCancelled&) {
          // ddprun is already stopping.
        } catch (const std::exception& e) {
          fail(e.what());
        }
      },
      fail);
}

void NodeRounds::check(std::function<void(rendezvous::Membership)> onChange,
                       std::function<void(const std::string&)> onLost) {
  if (checkInFlight_) {
    sayIfSilent();
    return;
  }
  if (!session_ || !session_->checkDue()) return;
  checkInFlight_ = true;
  checkSince_ = std::chrono::steady_clock::now();
  session_->post(
      [this, onChange, onLost](rendezvous::RendezvousHandler& handler) {
        try {
          const auto membership = handler.check();
          session_->noteNextCheck(handler);
          asio::post(io_, [this, membership, onChange] {
            checkInFlight_ = false;
            sayAnsweredAgain();
            // An unreachable backend is an outage: check() reports it lost after the liveness expiry.
            if (membership == rendezvous::Membership::kStable ||
                membership == rendezvous::Membership::kBackendUnreachable) {
              return;
            }
            onChange(membership);
          });
        } catch (const std::exception& e) {
          asio::post(io_, [this, message = std::string(e.what()), onLost] {
            checkInFlight_ = false;
            sayAnsweredAgain();
            onLost(message);
          });
        }
      },
      [](const std::string&) {});
}

void NodeRounds::sayIfSilent() {
  const auto waited = std::chrono::steady_clock::now() - checkSince_;
  if (saidSilent_ || waited < livenessOf(config_.rdzv).expiry()) return;
  saidSilent_ = true;
  spdlog::warn(
      "the rendezvous backend {}:{} has not answered a membership check for {:.1f} s (its host stopped or "
      "overloaded?); waiting up to read_timeout ({:g} s) for it",
      config_.rdzvHost, config_.rdzvPort, std::chrono::duration<double>(waited).count(), config_.rdzv.readTimeout);
}

void NodeRounds::sayAnsweredAgain() {
  if (!saidSilent_) return;
  saidSilent_ = false;
  spdlog::info("the rendezvous backend answered again after {:.1f} s",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - checkSince_).count());
}

void NodeRounds::confirm(std::function<void(MembershipVerdict)> answer) {
  if (config_.mode != RendezvousMode::kDynamic || !session_) {
    // A static job has no membership to change.
    asio::post(io_, [answer] { answer(MembershipVerdict::kUnchanged); });
    return;
  }
  session_->post(
      [this, answer](rendezvous::RendezvousHandler& handler) {
        auto verdict = MembershipVerdict::kUnchanged;
        try {
          verdict = confirmOnThread(handler);
        } catch (const std::exception& e) {
          spdlog::debug("membership check after a failure: {}", e.what());
        }
        session_->noteNextCheck(handler);  // expectChange() quickened the pace
        asio::post(io_, [answer, verdict] { answer(verdict); });
      },
      [this, answer](const std::string&) { asio::post(io_, [answer] { answer(MembershipVerdict::kUnchanged); }); });
}

void NodeRounds::finish(NodeEnd end, std::function<void()> then) {
  if (!session_ || end == NodeEnd::kAbandoned) {
    then();
    return;
  }
  if (end == NodeEnd::kStopped) session_->cancel();  // a join in progress gives up (and leaves its round) at once
  session_->post(
      [this, end, then](rendezvous::RendezvousHandler& handler) {
        handler.finish(outcomeOf(end), session_->cancelFlag());
        asio::post(io_, then);
      },
      [this, then](const std::string&) { asio::post(io_, then); });
}

void NodeRounds::cancel() {
  if (session_) session_->cancel();  // the exit barrier checks the flag at each look (at least once a second)
}

void NodeRounds::stop() {
  cancel();
  store_.stop();
}

void NodeRounds::close() { session_.reset(); }

store::StoreServer* NodeRounds::workersStore() {
  store::StoreServer* own = store_.server();
  if (own == nullptr || (config_.mode == RendezvousMode::kDynamic && current().groupRank != 0)) return nullptr;
  return own;
}

rendezvous::RoundAssignment NodeRounds::current() const {
  if (round_) return *round_;
  rendezvous::RoundAssignment round;
  round.worldSize = config_.nproc;
  round.masterAddr = store_.masterAddr();
  round.masterPort = store_.masterPort();
  return round;
}

}  // namespace ddprun::launcher
