#include "rendezvous/node_liveness.hpp"

#include "rendezvous/round_keys.hpp"

namespace ddprun::rendezvous {
namespace keys = round_keys;

NodeLiveness::NodeLiveness(store::PrefixStore& store, Clock& clock, LivenessSettings settings,
                           std::shared_ptr<NodeLease> lease)
    : store_(store), clock_(clock), settings_(settings), lease_(std::move(lease)) {}

void NodeLiveness::startAs(const std::string& nodeId) {
  self_ = nodeId;
  lastKeepAlive_ = {};
  aliveCounter_ = 0;
  requestsCount_ = false;
}

void NodeLiveness::holdLease() {
  if (!lease_ || leaseHeldFor_ == self_) return;
  lease_->hold(store_.join(keys::present(self_)));
  leaseHeldFor_ = self_;
}

void NodeLiveness::keepAliveIfDue() {
  if (self_.empty()) return;
  // A request the store counted as a heartbeat (node_connections.hpp) is one.
  if (requestsCount_ && lastRequest_ > lastKeepAlive_) lastKeepAlive_ = lastRequest_;
  const auto now = clock_.now();
  // Every keep_alive_interval, as torch does (the session's timer looks every half interval, so a beat is at most
  // 1.5 intervals after the last; the expiry is keep_alive_max_attempt intervals). 0.9: a timer that fires a little
  // early still beats.
  if (now - lastKeepAlive_ < settings_.interval * 9 / 10) return;
  const int64_t before = aliveCounter_;
  aliveCounter_ = call([&] { return store_.add(keys::alive(self_), 1); });
  // Nobody else ADDs this counter: one more than before means only this ADD counted; a host that counts requests
  // added one for the ADD's request too. (The first ADD on a connection is not counted: it is what names the node.)
  requestsCount_ = before > 0 && aliveCounter_ >= before + 2;
  lastKeepAlive_ = now;
}

std::optional<std::chrono::milliseconds> NodeLiveness::leaseLapsesWithin() const {
  if (!lease_) return std::nullopt;
  return lease_->lapsesWithin();
}

WatchedNode NodeLiveness::watch(const std::string& id) const { return WatchedNode{id, "", clock_.now()}; }

void NodeLiveness::appendKeysOf(std::vector<std::string>& wanted, const std::string& id) const {
  wanted.push_back(keys::alive(id));
  appendGoneKeys(wanted, id);
}

NodeLiveness::Verdict NodeLiveness::judge(WatchedNode& node, const std::vector<std::string>& values, size_t at,
                                          Clock::TimePoint now) {
  // A closed connection or a lapsed lease says at once what a stopped counter says only after the expiry.
  if (const Verdict gone = goneIn(values, at + 1); gone != Verdict::kAlive) return gone;
  return stale(node, values[at], now) ? Verdict::kStoppedHeartbeating : Verdict::kAlive;
}

bool NodeLiveness::heartbeatStopped(WatchedNode& node) {
  const auto beat = call([&] { return store_.get(keys::alive(node.id)); });
  return stale(node, beat.value_or(""), clock_.now());
}

std::optional<std::string> NodeLiveness::firstGoneOf(const std::vector<std::string>& ids) {
  std::vector<std::string> wanted;
  for (const auto& id : ids) appendGoneKeys(wanted, id);
  const auto v = call([&] { return store_.multiGet(wanted); });
  const size_t keysPerNode = wanted.size() / ids.size();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (goneIn(v, i * keysPerNode) != Verdict::kAlive) return ids[i];
  }
  return std::nullopt;
}

bool NodeLiveness::stale(WatchedNode& node, const std::string& counterNow, Clock::TimePoint now) const {
  // The expiry runs from the first look: a node seen for the first time (a closer, whose heartbeat key may not be
  // written yet) is not judged by a time before this node knew of it.
  if (counterNow != node.counter || node.changedAt == Clock::TimePoint{}) {
    node.counter = counterNow;
    node.changedAt = now;
    return false;
  }
  return now - node.changedAt >= settings_.expiry();
}

void NodeLiveness::appendGoneKeys(std::vector<std::string>& wanted, const std::string& id) const {
  wanted.push_back(keys::gone(id));
  if (lease_) wanted.push_back(keys::present(id));
}

NodeLiveness::Verdict NodeLiveness::goneIn(const std::vector<std::string>& values, size_t at) const {
  if (!values[at].empty()) return Verdict::kConnectionClosed;
  if (lease_ && values[at + 1].empty()) return Verdict::kLeaseLapsed;
  return Verdict::kAlive;
}

}  // namespace ddprun::rendezvous
