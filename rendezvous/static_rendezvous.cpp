#include "rendezvous/static_rendezvous.hpp"

#include <spdlog/spdlog.h>

#include "rendezvous/store_border.hpp"

namespace ddprun::rendezvous {
using Clock = std::chrono::steady_clock;

StaticRendezvous::StaticRendezvous(std::shared_ptr<store::Store> store, StaticRendezvousSettings settings)
    : store_("/ddprun.static." + settings.runId, std::move(store)), settings_(std::move(settings)) {}

std::string StaticRendezvous::describe() const {
  return "static rendezvous '" + settings_.runId + "' on the " + store_.describe();
}

void StaticRendezvous::claimNodeRank(const NodeDescriptor& self) {
  // Two nodes started with the same --node-rank would silently share ranks and hang in their first
  // collective; the first claim of a rank in a round wins and the second node is told.
  const std::string claim = "round/" + std::to_string(round_) + "/owner/" + std::to_string(settings_.nodeRank);
  const std::string owner = callStore([&] { return store_.compareSet(claim, "", self.id); });
  if (owner != self.id) {
    throw Error("static rendezvous '" + settings_.runId + "': --node-rank " + std::to_string(settings_.nodeRank) +
                " is already taken by node " + owner + "; every node needs its own rank below --nnodes");
  }
}

bool StaticRendezvous::waitAll(const std::vector<std::string>& keys, Clock::time_point deadline,
                               const CancelFlag& cancel) {
  while (Clock::now() < deadline) {
    if (cancel) throw RendezvousCancelled("rendezvous cancelled: ddprun is stopping");
    const auto slice = std::min<Clock::duration>(std::chrono::seconds(1), deadline - Clock::now());
    if (callStore([&] { return store_.wait(keys, std::chrono::duration_cast<std::chrono::milliseconds>(slice)); })) {
      return true;
    }
  }
  return false;
}

RoundAssignment StaticRendezvous::next(const NodeDescriptor& self, const CancelFlag& cancel) {
  ++round_;
  const std::string roundPrefix = "round/" + std::to_string(round_) + "/nproc/";
  claimNodeRank(self);
  callStore([&] { store_.set(roundPrefix + std::to_string(settings_.nodeRank), std::to_string(self.nproc)); });
  std::vector<std::string> keys;
  for (int rank = 0; rank < settings_.nnodes; ++rank) keys.push_back(roundPrefix + std::to_string(rank));
  if (!waitAll(keys, Clock::now() + settings_.joinTimeout, cancel)) {
    throw RendezvousTimeoutError("static rendezvous '" + settings_.runId + "': not all " +
                                 std::to_string(settings_.nnodes) + " nodes (--nnodes) arrived within the timeout");
  }
  const auto counts = callStore([&] { return store_.multiGet(keys); });
  RoundAssignment a;
  a.round = round_;
  a.groupRank = settings_.nodeRank;
  a.groupWorldSize = settings_.nnodes;
  a.worldSize = 0;
  for (int rank = 0; rank < settings_.nnodes; ++rank) {
    const int nproc = std::stoi(counts[static_cast<size_t>(rank)]);
    if (rank < settings_.nodeRank) a.rankOffset += nproc;
    a.worldSize += nproc;
  }
  a.masterAddr = settings_.masterAddr;
  a.masterPort = settings_.masterPort;
  spdlog::info("static rendezvous round {} complete: {} nodes, world size {}, this node is group rank {}", round_,
               a.groupWorldSize, a.worldSize, a.groupRank);
  return a;
}

void StaticRendezvous::finish(NodeOutcome outcome, const CancelFlag& cancel) {
  if (outcome == NodeOutcome::kStopped) return;  // static membership: nothing to leave
  try {
    callStore([&] { store_.set("done/" + std::to_string(settings_.nodeRank), "1"); });
    if (settings_.nodeRank != 0) return;
    // Node 0 serves the store: keep it up until every node has said it is done with it.
    std::vector<std::string> keys;
    for (int rank = 0; rank < settings_.nnodes; ++rank) keys.push_back("done/" + std::to_string(rank));
    if (!waitAll(keys, Clock::now() + settings_.closeTimeout, cancel)) {
      spdlog::warn("not every node reported its end within close_timeout; stopping the store anyway");
    }
  } catch (const RendezvousCancelled&) {
    // A signal cut the wait short; the agent has said so.
  } catch (const std::exception& e) {
    spdlog::warn("could not record the end of this node in the rendezvous: {}", e.what());
  }
}

}  // namespace ddprun::rendezvous
