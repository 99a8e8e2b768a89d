// The ticket rendezvous (--rdzv-backend c10d): its rank assignment without I/O; node liveness on its own (a fake
// clock, the in-memory store); its cost per node at 64 and 1,024 simulated nodes on the in-memory store with a
// fake clock (store operations and bytes counted, and a dead node seen only after the heartbeat expiry); then
// nodes joining through ddprun's real store: concurrent joins, node loss, scale-up, timeouts, closing, a node
// stopped while joining, the store host's exit barrier.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <future>
#include <mutex>
#include <set>
#include <thread>

#include "rendezvous/node_connections.hpp"
#include "rendezvous/node_liveness.hpp"
#include "rendezvous/round_keys.hpp"
#include "rendezvous/ticket_rendezvous.hpp"
#include "store/hash_store.hpp"
#include "store/prefix_store.hpp"
#include "store/store_client.hpp"
#include "store/store_errors.hpp"
#include "support/fake_clock.hpp"
#include "support/store_fixture.hpp"
#include "support/wait_until.hpp"

namespace ddprun::rendezvous {
namespace {
using namespace std::chrono_literals;

NodeDescriptor node(const std::string& id, int nproc = 1) {
  return NodeDescriptor{id, "addr-" + id, nproc, "store-" + id, 1000 + static_cast<int>(id.size())};
}

TEST(RoundKeys, RanksFollowNodeIdsOffsetsArePrefixSumsAndEveryNodeWatchesTheNext) {
  const std::vector<TicketRecord> records{{1, node("c", 2)}, {2, node("a", 1)}, {3, node("b", 3)}};
  const auto a = assignRanks(4, records);
  ASSERT_EQ(a.size(), 3u);
  // Tickets c, a, b; ids a < b < c: group ranks 2, 0, 1.
  EXPECT_EQ(a[0].place.groupRank, 2);
  EXPECT_EQ(a[1].place.groupRank, 0);
  EXPECT_EQ(a[2].place.groupRank, 1);
  EXPECT_EQ(a[1].place.rankOffset, 0);
  EXPECT_EQ(a[2].place.rankOffset, 1);
  EXPECT_EQ(a[0].place.rankOffset, 4);
  for (const auto& x : a) {
    EXPECT_EQ(x.place.worldSize, 6);
    EXPECT_EQ(x.place.groupWorldSize, 3);
    EXPECT_EQ(x.place.round, 4);
    EXPECT_EQ(x.place.masterAddr, "store-a");  // group rank 0's workers' store
  }
  EXPECT_EQ(a[1].watchId, "b");  // a watches b, b watches c, c watches a
  EXPECT_EQ(a[1].watchTicket, 3);
  EXPECT_EQ(a[2].watchId, "c");
  EXPECT_EQ(a[0].watchId, "a");
  EXPECT_TRUE(assignRanks(0, {{1, node("solo")}})[0].watchId.empty());
  EXPECT_THROW(assignRanks(0, {{1, node("x")}, {2, node("x")}}), Error);
  EXPECT_EQ(decodeAssignment(encodeAssignment(a[0]), 4, 2, 3).place.rankOffset, 4);
  EXPECT_EQ(decodeRecord(encodeRecord(node("c", 2))).nproc, 2);
  EXPECT_THROW(decodeRecord("not json"), RendezvousValueError);
  EXPECT_EQ(closedSize("12 a_1"), 12);
  EXPECT_FALSE(closedSize("ended"));
  EXPECT_EQ(decodeRoundEnd(encodeRoundEnd(RoundEnd::kDead, "node x stopped heartbeating")).first, RoundEnd::kDead);
}

/// Node c's assignment from a round of c, a, b (ranks 4-5 of 6 in round 4), with `field` set to `value` (raw JSON).
std::string forgedAssignment(const std::string& field, const std::string& value) {
  const auto a = assignRanks(4, {{1, node("c", 2)}, {2, node("a", 1)}, {3, node("b", 3)}});
  std::string text = encodeAssignment(a[0]);
  const std::string key = "\"" + field + "\":";
  const size_t at = text.find(key) + key.size();
  const size_t end = text.find_first_of(",}", at);
  return text.replace(at, end - at, value);
}

TEST(RoundKeys, AnAssignmentOrRecordNoDdprunWritesIsRefusedNamingTheField) {
  // What a forged or corrupt key could start workers with: each one is refused, naming the field.
  const std::vector<std::pair<std::string, std::string>> bad{{"group_rank", "-1"},
                                                             {"group_rank", "3"},
                                                             {"group_world_size", "4"},
                                                             {"world_size", "99999999999"},
                                                             {"world_size", "1e3"},
                                                             {"rank_offset", "-2"},
                                                             {"rank_offset", "5"},
                                                             {"master_port", "70000"},
                                                             {"master_port", "0"},
                                                             {"round", "5"},
                                                             {"round", "2147483648"},
                                                             {"master_addr", "\"a\\u001b[2Jb\""},
                                                             {"watch_id", "\"x\\ny\""},
                                                             {"watch_ticket", "9"},
                                                             {"world_size", "18446744073709551615"}};
  for (const auto& [field, value] : bad) {
    try {
      decodeAssignment(forgedAssignment(field, value), 4, 2, 3);
      ADD_FAILURE() << field << "=" << value << " was accepted";
    } catch (const RendezvousValueError& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\x1b'), std::string::npos) << "an escape reached the message";
    }
  }
  EXPECT_EQ(decodeAssignment(forgedAssignment("master_port", "29500"), 4, 2, 3).place.masterPort, 29500);
  NodeDescriptor n = node("c", 2);
  for (auto change : std::vector<std::function<void(NodeDescriptor&)>>{
           [](NodeDescriptor& d) { d.nproc = 0; }, [](NodeDescriptor& d) { d.storePort = 70000; },
           [](NodeDescriptor& d) { d.id = "x\n[2026-01-01] forged line"; }, [](NodeDescriptor& d) { d.id = ""; }}) {
    NodeDescriptor d = n;
    change(d);
    EXPECT_THROW(decodeRecord(encodeRecord(d)), RendezvousValueError);
  }
  EXPECT_EQ(parseRound("17"), 17);
  EXPECT_FALSE(parseRound("1000000000000"));
  EXPECT_FALSE(parseRound("2147483647"));
  EXPECT_FALSE(parseRound("-1"));
  EXPECT_FALSE(closedSize("99999999999 a_1"));
}

// --- NodeLiveness on its own: a fake clock, the in-memory store ---------------------------------------------

/// A lease that writes the key it holds into `store` and never lapses by itself (a node without the key has lapsed).
class StoreLease : public NodeLease {
 public:
  explicit StoreLease(std::shared_ptr<store::Store> store) : store_(std::move(store)) {}
  void hold(const std::string& key) override {
    store_->set(key, "held");
    ++holds;
  }
  std::chrono::milliseconds lapsesWithin() const override { return 2s; }
  int holds = 0;

 private:
  std::shared_ptr<store::Store> store_;
};

/// Judges `node` as TicketRendezvous::check does: its keys read in one MULTI_GET, judged at the clock's now.
NodeLiveness::Verdict judgeNow(NodeLiveness& watcher, store::Store& store, WatchedNode& node, Clock& clock) {
  std::vector<std::string> wanted;
  watcher.appendKeysOf(wanted, node.id);
  return watcher.judge(node, store.multiGet(wanted), 0, clock.now());
}

TEST(NodeLiveness, ANodeWhoseHeartbeatsStopIsJudgedStoppedAfterTheExpiryNotBeforeAndALiveOneNever) {
  test::FakeClock clock;
  store::PrefixStore store(round_keys::prefix("job"), std::make_shared<store::HashStore>(clock));
  const LivenessSettings liveness{5s, 3};  // dead after 15 s
  NodeLiveness watcher(store, clock, liveness, nullptr), alive(store, clock, liveness, nullptr),
      dying(store, clock, liveness, nullptr);
  alive.startAs("alive");
  dying.startAs("dying");
  WatchedNode a = watcher.watch("alive"), d = watcher.watch("dying");
  for (int second = 0; second < 30; ++second) {
    alive.keepAliveIfDue();
    if (second <= 5) dying.keepAliveIfDue();  // its last heartbeat: second 5
    EXPECT_EQ(judgeNow(watcher, store, a, clock), NodeLiveness::Verdict::kAlive) << second << " s";
    const auto verdict = judgeNow(watcher, store, d, clock);
    if (second < 20) {
      EXPECT_EQ(verdict, NodeLiveness::Verdict::kAlive) << "judged stopped after " << second << " s";
    } else {
      EXPECT_EQ(verdict, NodeLiveness::Verdict::kStoppedHeartbeating) << second << " s";
    }
    clock.advance(1s);
  }
  // A store that does not count requests as heartbeats: one ADD per keep_alive_interval (0, 5, …, 25 s), no more.
  EXPECT_EQ(store.get(round_keys::alive("alive")), "6");
  EXPECT_EQ(store.get(round_keys::alive("dying")), "2");
  // A node never read before (a closer, whose counter may not exist yet) is judged from the first read, not at once.
  WatchedNode closer{"claimer", "", {}};  // no counter written: "" as when never read
  EXPECT_FALSE(watcher.heartbeatStopped(closer));
  clock.advance(14s);
  EXPECT_FALSE(watcher.heartbeatStopped(closer));
  clock.advance(1s);
  EXPECT_TRUE(watcher.heartbeatStopped(closer));
}

TEST(NodeLiveness, AGoneMarkOrALapsedLeaseIsSeenAtOnceAndFirstGoneOfNamesTheFirstSuchNode) {
  test::FakeClock clock;
  auto shared = std::make_shared<store::HashStore>(clock);
  store::PrefixStore store(round_keys::prefix("job"), shared);
  const LivenessSettings liveness{5s, 3};
  // ddprun's store: the host marks a node gone when its connection closes.
  NodeLiveness watcher(store, clock, liveness, nullptr);
  WatchedNode b = watcher.watch("b");
  EXPECT_EQ(judgeNow(watcher, store, b, clock), NodeLiveness::Verdict::kAlive);
  store.set(round_keys::gone("b"), "1");
  EXPECT_EQ(judgeNow(watcher, store, b, clock), NodeLiveness::Verdict::kConnectionClosed);
  EXPECT_EQ(watcher.firstGoneOf({"a", "b", "c"}), "b");
  EXPECT_EQ(watcher.firstGoneOf({"a", "c"}), std::nullopt);
  // etcd: each node holds present/<id> under its lease, written once per node id; a node without it has lapsed.
  auto lease = std::make_shared<StoreLease>(shared);
  NodeLiveness leased(store, clock, liveness, lease),
      watcherWithLease(store, clock, liveness, std::make_shared<StoreLease>(shared));
  EXPECT_EQ(leased.leaseLapsesWithin(), 2s);
  EXPECT_EQ(watcher.leaseLapsesWithin(), std::nullopt);
  leased.startAs("a");
  leased.holdLease();
  leased.holdLease();
  EXPECT_EQ(lease->holds, 1);
  EXPECT_TRUE(shared->get(round_keys::prefix("job") + "/" + round_keys::present("a")).has_value());
  WatchedNode a = watcherWithLease.watch("a"), c = watcherWithLease.watch("c");
  EXPECT_EQ(judgeNow(watcherWithLease, store, a, clock), NodeLiveness::Verdict::kAlive);
  EXPECT_EQ(judgeNow(watcherWithLease, store, c, clock), NodeLiveness::Verdict::kLeaseLapsed);
  EXPECT_EQ(watcherWithLease.firstGoneOf({"a", "c", "b"}), "c");
}

/// Counts the operations and bytes (keys and values, both ways) that reach the store.
class CountingStore : public store::Store {
 public:
  explicit CountingStore(std::shared_ptr<store::Store> inner) : inner_(std::move(inner)) {}
  std::string describe() const override { return inner_->describe(); }
  void set(const std::string& k, const std::string& v) override { note(k.size() + v.size()), inner_->set(k, v); }
  std::optional<std::string> get(const std::string& k) override {
    auto v = inner_->get(k);
    note(k.size() + (v ? v->size() : 0));
    return v;
  }
  std::string compareSet(const std::string& k, const std::string& e, const std::string& d) override {
    auto v = inner_->compareSet(k, e, d);
    note(k.size() + e.size() + d.size() + v.size());
    return v;
  }
  int64_t add(const std::string& k, int64_t delta) override { return note(k.size() + 16), inner_->add(k, delta); }
  void erase(const std::string& k) override { note(k.size() + 8), inner_->erase(k); }
  void multiSet(const std::vector<std::pair<std::string, std::string>>& entries) override {
    size_t bytes = 0;
    for (const auto& [k, v] : entries) bytes += k.size() + v.size();
    note(bytes);
    inner_->multiSet(entries);
  }
  std::vector<std::string> multiGet(const std::vector<std::string>& keys) override {
    auto values = inner_->multiGet(keys);
    size_t bytes = 0;
    for (size_t i = 0; i < keys.size(); ++i) bytes += keys[i].size() + values[i].size();
    note(bytes);
    return values;
  }
  bool wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    size_t bytes = 0;
    for (const auto& k : keys) bytes += k.size();
    note(bytes);
    return inner_->wait(keys, timeout);
  }
  std::atomic<int64_t> ops{0}, bytes{0};

 private:
  void note(size_t b) {
    ops += 1;
    bytes += static_cast<int64_t>(b);
  }
  std::shared_ptr<store::Store> inner_;
};

DynamicRendezvousSettings settingsOf(test::FakeClock* clock, int minNodes, int maxNodes,
                                     std::chrono::milliseconds lastCall = 30s) {
  DynamicRendezvousSettings s;
  s.runId = "job";
  s.limits = RoundLimits{minNodes, maxNodes, lastCall.count()};
  s.joinTimeout = 600s;
  s.closeTimeout = 30s;
  s.liveness = LivenessSettings{5s, 3};
  if (clock != nullptr) s.clock = clock;
  return s;
}

struct Cost {
  double opsPerNode = 0, bytesPerNode = 0;
};

/// `n` nodes (threads) join one round of exactly n on the in-memory store; the rendezvous judges time by a fake
/// clock (waits on the store still wake at once when a key appears). Checks ranks; returns the store's cost.
Cost joinSimulatedRound(int n) {
  test::FakeClock clock;
  auto counting = std::make_shared<CountingStore>(std::make_shared<store::HashStore>());
  std::vector<std::unique_ptr<TicketRendezvous>> nodes;
  for (int i = 0; i < n; ++i) nodes.push_back(std::make_unique<TicketRendezvous>(counting, settingsOf(&clock, n, n)));
  CancelFlag cancel{false};
  std::vector<RoundAssignment> got(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      char id[16];
      std::snprintf(id, sizeof id, "n%05d", i);
      got[static_cast<size_t>(i)] = nodes[static_cast<size_t>(i)]->next(node(id, 1 + i % 2), cancel);
    });
  }
  for (auto& t : threads) t.join();
  std::set<int> ranks;
  int offset = 0;
  for (int i = 0; i < n; ++i) {
    const auto& a = got[static_cast<size_t>(i)];
    EXPECT_EQ(a.groupRank, i);  // ids sort in index order
    EXPECT_EQ(a.rankOffset, offset);
    EXPECT_EQ(a.groupWorldSize, n);
    offset += 1 + i % 2;
    ranks.insert(a.groupRank);
  }
  EXPECT_EQ(ranks.size(), static_cast<size_t>(n));
  return Cost{static_cast<double>(counting->ops) / n, static_cast<double>(counting->bytes) / n};
}

/// `n` nodes ("n00000", "n00001", …) that have joined one round of exactly n on `store` (threads, judged by `clock`).
std::vector<std::unique_ptr<TicketRendezvous>> joinedRound(int n, test::FakeClock& clock,
                                                           const std::shared_ptr<store::Store>& store) {
  std::vector<std::unique_ptr<TicketRendezvous>> nodes;
  for (int i = 0; i < n; ++i) nodes.push_back(std::make_unique<TicketRendezvous>(store, settingsOf(&clock, n, n)));
  CancelFlag cancel{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      char id[16];
      std::snprintf(id, sizeof id, "n%05d", i);
      nodes[static_cast<size_t>(i)]->next(node(id), cancel);
    });
  }
  for (auto& t : threads) t.join();
  return nodes;
}

TEST(TicketRendezvousCost, ARoundCostsTheSameStoreOperationsAndBytesPerNodeAt64And1024Nodes) {
  const Cost small = joinSimulatedRound(64);
  const Cost large = joinSimulatedRound(1024);
  // One compare-and-set value listing every node costs O(n) attempts of O(n) bytes per node: 16 times the
  // nodes would mean hundreds of times the bytes per node. Here the cost per node stays flat.
  EXPECT_LE(large.opsPerNode, 1.5 * small.opsPerNode + 2) << small.opsPerNode << " -> " << large.opsPerNode;
  EXPECT_LE(large.bytesPerNode, 1.5 * small.bytesPerNode + 200) << small.bytesPerNode << " -> " << large.bytesPerNode;
  // 7.0 measured; 9.0 when a join read closed, the round hint and ended one by one. Nodes that find the round full
  // before its claim, or claimed before its close, look once or twice more: the margin is for them.
  EXPECT_LE(large.opsPerNode, 8.5) << "a join reads closed, the round hint and ended in one request";
  EXPECT_LE(large.bytesPerNode, 2048);
  RecordProperty("ops_per_node_1024", std::to_string(large.opsPerNode));
  RecordProperty("bytes_per_node_1024", std::to_string(large.bytesPerNode));
  std::printf("ops/node %.1f -> %.1f, bytes/node %.0f -> %.0f (64 -> 1024 nodes)\n", small.opsPerNode, large.opsPerNode,
              small.bytesPerNode, large.bytesPerNode);
}

TEST(TicketRendezvousCost, ADeadNodeAmong1024IsSeenByItsWatcherAfterTheExpiryNotBeforeAndEndsTheRound) {
  constexpr int n = 1024;
  test::FakeClock clock;
  auto counting = std::make_shared<CountingStore>(std::make_shared<store::HashStore>());
  auto nodes = joinedRound(n, clock, counting);
  // Node 500 dies: it no longer heartbeats. Everyone else keeps beating and checks once per simulated second.
  std::set<int> lost;
  const auto checkAll = [&] {
    for (int i = 0; i < n; ++i) {
      if (i == 500) continue;
      nodes[static_cast<size_t>(i)]->keepAlive();
      if (nodes[static_cast<size_t>(i)]->check() == Membership::kNodeLost) lost.insert(i);
    }
  };
  const int64_t opsBefore = counting->ops;
  for (int second = 0; second < 14; ++second) {
    checkAll();
    ASSERT_TRUE(lost.empty()) << "node " << *lost.begin() << " saw a loss after " << second << " s";
    clock.advance(1s);
  }
  const double opsPerNodeSecond = static_cast<double>(counting->ops - opsBefore) / (14.0 * (n - 1));
  EXPECT_LE(opsPerNodeSecond, 2.5) << "checks and heartbeats must stay O(1) per node";
  // Past 15 s (keep_alive_interval x keep_alive_max_attempt): node 499, its watcher, ends the round; every
  // other node sees that at its next check (at most min(2 ms x nodes, keep_alive_interval / 2) later).
  for (int second = 14; second < 22; ++second) {
    clock.advance(1s);
    checkAll();
  }
  EXPECT_EQ(lost.size(), static_cast<size_t>(n - 1));
}

TEST(TicketRendezvousCost, AfterExpectChangeANodeOfALargeRoundSeesTheRoundEndWithinTheMembershipWindow) {
  // 256 nodes pace their checks 512 ms apart (2 ms x nodes); a node whose workers just failed must see the round
  // end within the 500 ms membership window, or its failure would spend a restart.
  constexpr int n = 256;
  test::FakeClock clock;
  auto store = std::make_shared<store::HashStore>();
  auto nodes = joinedRound(n, clock, store);
  CancelFlag cancel{false};
  TicketRendezvous& a = *nodes[0];
  EXPECT_EQ(a.check(), Membership::kStable);
  nodes[7]->finish(NodeOutcome::kStopped, cancel);  // node 7 leaves: the round ends
  clock.advance(30ms);
  EXPECT_EQ(a.check(), Membership::kStable) << "paced: the store is not read again before 512 ms";
  a.expectChange();
  EXPECT_EQ(a.check(), Membership::kNodeLost);
}

TEST(TicketRendezvousCost, ANodeSaysWhenItsNextCheckReadsTheStoreAndAChecksBeforeThenCostNothing) {
  // The agent skips its every-tick check until checkDueIn() has passed (launcher/agent.cpp): that must lose nothing,
  // so a check before then must not reach the store, and one at that time must.
  constexpr int n = 256;
  test::FakeClock clock;
  auto counting = std::make_shared<CountingStore>(std::make_shared<store::HashStore>());
  auto nodes = joinedRound(n, clock, counting);
  TicketRendezvous& a = *nodes[0];
  EXPECT_EQ(a.checkDueIn(), 0ms) << "a new round is checked at once";
  EXPECT_EQ(a.check(), Membership::kStable);
  EXPECT_EQ(a.checkDueIn(), 512ms) << "2 ms x nodes";
  clock.advance(500ms);
  EXPECT_EQ(a.checkDueIn(), 12ms);
  const int64_t before = counting->ops;
  EXPECT_EQ(a.check(), Membership::kStable);
  EXPECT_EQ(counting->ops, before) << "a check before it is due reads nothing";
  clock.advance(12ms);
  EXPECT_EQ(a.checkDueIn(), 0ms);
  EXPECT_EQ(a.check(), Membership::kStable);
  EXPECT_GT(counting->ops, before);
  a.expectChange();
  EXPECT_EQ(a.checkDueIn(), 0ms) << "a suspected change is checked at once";
}

// --- Timeouts on a fake clock (the in-memory store's waits sleep on it: no wall time passes) -----------------

/// Calls a hook before every operation of the store it wraps (a slow or failing backend).
class HookedStore : public store::Store {
 public:
  HookedStore(std::shared_ptr<store::Store> inner, std::function<void(const char*)> hook)
      : inner_(std::move(inner)), hook_(std::move(hook)) {}
  std::string describe() const override { return "hooked in-memory store"; }
  void set(const std::string& k, const std::string& v) override { hook_("set"), inner_->set(k, v); }
  std::optional<std::string> get(const std::string& k) override { return hook_("get"), inner_->get(k); }
  std::string compareSet(const std::string& k, const std::string& e, const std::string& d) override {
    return hook_("compareSet"), inner_->compareSet(k, e, d);
  }
  int64_t add(const std::string& k, int64_t delta) override { return hook_("add"), inner_->add(k, delta); }
  void erase(const std::string& k) override { hook_("erase"), inner_->erase(k); }
  void multiSet(const std::vector<std::pair<std::string, std::string>>& entries) override {
    hook_("multiSet"), inner_->multiSet(entries);
  }
  std::vector<std::string> multiGet(const std::vector<std::string>& keys) override {
    return hook_("multiGet"), inner_->multiGet(keys);
  }
  bool wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    return hook_("wait"), inner_->wait(keys, timeout);
  }

 private:
  std::shared_ptr<store::Store> inner_;
  std::function<void(const char*)> hook_;
};

TEST(TicketRendezvousOnAFakeClock, TooFewNodesTimeOutAtJoinTimeoutAndLeaveNoPlaceBehind) {
  test::FakeClock clock;
  auto store = std::make_shared<store::HashStore>(clock);
  TicketRendezvous a(store, settingsOf(&clock, 2, 2));
  CancelFlag cancel{false};
  const auto start = clock.now();
  try {
    a.next(node("a"), cancel);
    FAIL() << "expected a timeout";
  } catch (const RendezvousTimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("1 node(s) joined, at least 2 needed"), std::string::npos) << e.what();
  }
  EXPECT_GE(clock.now() - start, 600s);
  EXPECT_LE(clock.now() - start, 602s);
  // It ended round 0 on its way out: the next node starts round 1 instead of joining a's ghost.
  EXPECT_TRUE(store->get("/ddprun.rdzv.job/" + round_keys::ended(0)).has_value());
}

TEST(TicketRendezvousOnAFakeClock, LeavingTheLastRoundAndJoiningTheNextShareOneJoinTimeout) {
  // a and b run round 0. a leaves it through a backend that takes 400 s to answer, then waits for a second
  // node that never comes. torch counts join_timeout once for the whole call: 600 s, not 400 + 600.
  test::FakeClock clock;
  auto shared = std::make_shared<store::HashStore>(clock);
  std::atomic<bool> slow{false};
  auto store = std::make_shared<HookedStore>(shared, [&](const char* op) {
    if (slow && std::string(op) == "compareSet") {
      clock.advance(400s);
      slow = false;
    }
  });
  // b holds ticket 1 of round 0 (as if it joined first); a's ticket 2 completes the round.
  shared->add("/ddprun.rdzv.job/" + round_keys::tickets(0), 1);
  shared->set("/ddprun.rdzv.job/" + round_keys::node(0, 1), encodeRecord(node("b")));
  TicketRendezvous a(store, settingsOf(&clock, 2, 2));
  CancelFlag cancel{false};
  EXPECT_EQ(a.next(node("a"), cancel).groupWorldSize, 2);
  slow = true;
  const auto start = clock.now();
  EXPECT_THROW(a.next(node("a"), cancel), RendezvousTimeoutError);
  EXPECT_GE(clock.now() - start, 600s);
  EXPECT_LE(clock.now() - start, 602s) << "join_timeout was counted twice";
}

TEST(TicketRendezvousOnAFakeClock, ALostBackendIsReportedAfterTheLivenessExpiryNotBefore) {
  test::FakeClock clock;
  bool down = false;
  auto store = std::make_shared<HookedStore>(std::make_shared<store::HashStore>(clock), [&](const char*) {
    if (down) throw store::StoreConnectionError("hooked in-memory store: connection refused");
  });
  TicketRendezvous a(store, settingsOf(&clock, 1, 1));
  CancelFlag cancel{false};
  a.next(node("a"), cancel);
  down = true;
  for (int second = 0; second < 14; ++second) {
    Membership m = Membership::kStable;
    EXPECT_NO_THROW(m = a.check()) << "reported lost after " << second << " s";
    EXPECT_EQ(m, Membership::kBackendUnreachable);
    clock.advance(1s);
  }
  clock.advance(1s);  // 15 s = keep_alive_interval x keep_alive_max_attempt
  try {
    a.check();
    FAIL() << "the lost backend was never reported";
  } catch (const RendezvousBackendError& e) {
    EXPECT_NE(std::string(e.what()).find("lost the rendezvous backend"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("connection refused"), std::string::npos) << e.what();
  }
}

TEST(TicketRendezvousOnAFakeClock, ACancelWhileWaitingEndsTheJoinAndTheRoundItHeldAPlaceIn) {
  test::FakeClock clock;
  auto shared = std::make_shared<store::HashStore>(clock);
  CancelFlag cancel{false};
  auto store = std::make_shared<HookedStore>(shared, [&](const char* op) {
    if (std::string(op) == "wait") cancel = true;  // SIGTERM while the node waits for others
  });
  TicketRendezvous a(store, settingsOf(&clock, 2, 2));
  const auto start = clock.now();
  EXPECT_THROW(a.next(node("a"), cancel), RendezvousCancelled);
  EXPECT_LE(clock.now() - start, 3s);  // the in-memory store's wait ends after one poll (2.5 s here)
  EXPECT_TRUE(shared->get("/ddprun.rdzv.job/" + round_keys::ended(0)).has_value());
}

TEST(TicketRendezvousOnAFakeClock, AFullRoundWhoseNodesAllDiedMakesRoomOnlyAfterTheLivenessExpiry) {
  // Round 0 is full (b and c, MAX 2), then both die. a arrives late and waits; only after the liveness expiry
  // does it end the round (it watches the round's first node) and form round 1 alone (MIN 1).
  test::FakeClock clock;
  auto shared = std::make_shared<store::HashStore>(clock);
  const std::string prefix = "/ddprun.rdzv.job/";
  const std::vector<TicketRecord> records{{1, node("b")}, {2, node("c")}};
  const auto assigned = assignRanks(0, records);
  shared->add(prefix + round_keys::tickets(0), 2);
  for (size_t i = 0; i < records.size(); ++i) {
    shared->set(prefix + round_keys::node(0, records[i].ticket), encodeRecord(records[i].node));
    shared->set(prefix + round_keys::assignment(0, records[i].ticket), encodeAssignment(assigned[i]));
    shared->add(prefix + round_keys::alive(records[i].node.id), 1);  // their last heartbeat
  }
  shared->set(prefix + round_keys::closing(0), "2 b");  // b's claim, then its close
  shared->set(prefix + round_keys::size(0), "2 b");
  CancelFlag cancel{false};
  TicketRendezvous a(shared, settingsOf(&clock, 1, 2, 1s));
  const auto start = clock.now();
  const auto assignment = a.next(node("a"), cancel);  // b and c never heartbeat again
  EXPECT_EQ(assignment.round, 1);
  EXPECT_EQ(assignment.groupWorldSize, 1);
  EXPECT_GE(clock.now() - start, 15s);  // not before the liveness expiry
  EXPECT_LE(clock.now() - start, 20s);
}

/// Node b took ticket 1 of round 0 (MAX 2), claimed its close and died before it wrote the assignments and "size"
/// (`withHeartbeat`: after one heartbeat; otherwise before its first). Node a takes ticket 2 and waits for b while
/// its heartbeat might still move, judged from a's first look at the claim, then ends the round and forms round 1
/// alone (MIN 1). Checks the timing and the round; returns what round 0's "ended" says.
std::string joinPastADeadClaimer(bool withHeartbeat) {
  test::FakeClock clock;
  auto shared = std::make_shared<store::HashStore>(clock);
  const std::string prefix = "/ddprun.rdzv.job/";
  shared->add(prefix + round_keys::tickets(0), 1);
  shared->set(prefix + round_keys::node(0, 1), encodeRecord(node("b")));
  if (withHeartbeat) shared->add(prefix + round_keys::alive("b"), 1);
  shared->set(prefix + round_keys::closing(0), "2 b");
  CancelFlag cancel{false};
  TicketRendezvous a(shared, settingsOf(&clock, 1, 2, 1s));
  const auto start = clock.now();
  const auto assignment = a.next(node("a"), cancel);
  EXPECT_EQ(assignment.round, 1);
  EXPECT_EQ(assignment.groupWorldSize, 1);
  EXPECT_GE(clock.now() - start, 15s);  // not before the liveness expiry
  EXPECT_LE(clock.now() - start, 20s);
  return shared->get(prefix + round_keys::ended(0)).value_or("");
}

TEST(TicketRendezvousOnAFakeClock, ANodeThatClaimedTheCloseAndDiedBeforeAssigningEndsTheRoundAfterTheLivenessExpiry) {
  const std::string ended = joinPastADeadClaimer(true);
  EXPECT_NE(ended.find("claimed by node b, which stopped before it assigned the ranks"), std::string::npos) << ended;
}

TEST(TicketRendezvousOnAFakeClock, AClaimerWhoseHeartbeatWasNeverSeenIsJudgedFromTheFirstLookNotAtOnce) {
  // Judged at once (its counter's "last change" at the clock's epoch), a would end the round right away.
  EXPECT_NE(joinPastADeadClaimer(false).find("claimed by node b"), std::string::npos);
}

/// Node a joins a round of 2 alone; at its first wait, `forge` writes into the store (as a rogue client would).
/// Returns how long a's next() took on the fake clock, what it threw, and round 0's "ended".
struct ForgedJoin {
  std::chrono::seconds took{0};
  std::string error;
  std::string ended;
};
ForgedJoin joinWithAForgery(const std::function<void(store::Store&, const std::string& prefix)>& forge,
                            bool keepForging = false) {
  test::FakeClock clock;
  auto shared = std::make_shared<store::HashStore>(clock);
  const std::string prefix = "/ddprun.rdzv.job/";
  bool forged = false;
  auto store = std::make_shared<HookedStore>(shared, [&](const char* op) {
    if (std::string(op) == "wait" && (!forged || keepForging)) {
      forged = true;
      forge(*shared, prefix);
    }
  });
  TicketRendezvous a(store, settingsOf(&clock, 2, 2));
  CancelFlag cancel{false};
  ForgedJoin out;
  const auto start = clock.now();
  try {
    a.next(node("a"), cancel);
    out.error = "(joined)";
  } catch (const RendezvousTimeoutError& e) {
    out.error = e.what();
  }
  out.took = std::chrono::duration_cast<std::chrono::seconds>(clock.now() - start);
  out.ended = shared->get(prefix + round_keys::ended(0)).value_or("");
  return out;
}

TEST(TicketRendezvousOnAFakeClock, AForgedSizeKeyFailsItsRoundAtOnceAndTheJoinEndsAtJoinTimeout) {
  // One write of "size" naming a live node (the red team's reproducer): without the check, a waited for an
  // assignment that never came, past join_timeout, polling every millisecond.
  const auto j = joinWithAForgery([](store::Store& s, const std::string& p) {
    s.set(p + round_keys::size(0), "1 a_live");
    s.add(p + round_keys::alive("a_live"), 1);
  });
  EXPECT_NE(j.ended.find("key r0/size held a value no ddprun writes"), std::string::npos) << j.ended;
  EXPECT_NE(j.error.find("did not complete within join_timeout"), std::string::npos) << j.error;
  EXPECT_LE(j.took, 602s);
}

TEST(TicketRendezvousOnAFakeClock, AForgedCloseByAHeartbeatingRogueEndsAtJoinTimeoutNamingIt) {
  // The claim and the size forged alike, by a node that keeps heartbeating and never writes the assignments.
  const auto j = joinWithAForgery(
      [](store::Store& s, const std::string& p) {
        s.compareSet(p + round_keys::closing(0), "", "1 rogue");
        s.compareSet(p + round_keys::size(0), "", "1 rogue");
        s.add(p + round_keys::alive("rogue"), 1);
      },
      true);
  EXPECT_NE(j.error.find("node 'rogue', which never wrote this node's assignment"), std::string::npos) << j.error;
  EXPECT_GE(j.took, 600s);
  EXPECT_LE(j.took, 602s);
}

TEST(TicketRendezvousOnAFakeClock, AForgedAssignmentFailsItsRoundNamingTheKeyAndNoWorkerStartsWithIt) {
  // a's own close is overwritten with an assignment of a negative rank before a reads it.
  const auto j = joinWithAForgery([](store::Store& s, const std::string& p) {
    s.add(p + round_keys::tickets(0), 1);
    s.set(p + round_keys::node(0, 2), encodeRecord(node("b")));
    s.compareSet(p + round_keys::closing(0), "", "2 b");
    s.set(p + round_keys::assignment(0, 1), forgedAssignment("group_rank", "-1"));
    s.compareSet(p + round_keys::size(0), "", "2 b");
  });
  EXPECT_NE(j.ended.find("key r0/assign/1 held a value no ddprun writes"), std::string::npos) << j.ended;
  EXPECT_LE(j.took, 602s);
}

/// The in-memory store, noting at every compare-set of a round's "size" to "N <closer>" whether the assignments of
/// tickets 1..N were all there already.
class SizeAfterAssignmentsStore : public store::Store {
 public:
  explicit SizeAfterAssignmentsStore(std::shared_ptr<store::Store> inner) : inner_(std::move(inner)) {}
  std::string describe() const override { return "checking in-memory store"; }
  void set(const std::string& k, const std::string& v) override { inner_->set(k, v); }
  std::optional<std::string> get(const std::string& k) override { return inner_->get(k); }
  std::string compareSet(const std::string& k, const std::string& e, const std::string& d) override {
    const std::string suffix = "/" + round_keys::size(0);
    if (k.size() >= suffix.size() && k.compare(k.size() - suffix.size(), suffix.size(), suffix) == 0 && d != "ended") {
      const std::string prefix = k.substr(0, k.size() - suffix.size() + 1);
      const auto n = closedSize(d).value_or(0);
      bool all = n > 0;
      for (int64_t t = 1; t <= n; ++t) all = all && inner_->get(prefix + round_keys::assignment(0, t)).has_value();
      std::lock_guard<std::mutex> lock(mutex_);
      closes_.push_back(all);
    }
    return inner_->compareSet(k, e, d);
  }
  int64_t add(const std::string& k, int64_t delta) override { return inner_->add(k, delta); }
  void erase(const std::string& k) override { inner_->erase(k); }
  void multiSet(const std::vector<std::pair<std::string, std::string>>& entries) override { inner_->multiSet(entries); }
  std::vector<std::string> multiGet(const std::vector<std::string>& keys) override { return inner_->multiGet(keys); }
  bool wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    return inner_->wait(keys, timeout);
  }
  /// For each close seen: whether every assignment was written before it.
  std::vector<bool> closes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return closes_;
  }

 private:
  std::shared_ptr<store::Store> inner_;
  std::mutex mutex_;
  std::vector<bool> closes_;
};

TEST(TicketRendezvousOnAFakeClock, TheRoundIsClosedOnlyAfterItsAssignmentsAreWritten) {
  // What a waiting node is woken by ("size") must find its assignment already there: one read after the wake.
  // The store's waits take real time (as in joinSimulatedRound): threads sleeping on one fake clock would age each
  // other's deadlines.
  test::FakeClock clock;
  auto shared = std::make_shared<store::HashStore>();
  auto store = std::make_shared<SizeAfterAssignmentsStore>(shared);
  constexpr int kNodes = 8;
  std::vector<std::unique_ptr<TicketRendezvous>> nodes;
  for (int i = 0; i < kNodes; ++i) {
    nodes.push_back(std::make_unique<TicketRendezvous>(store, settingsOf(&clock, kNodes, kNodes)));
  }
  CancelFlag cancel{false};
  std::vector<std::thread> threads;
  std::vector<RoundAssignment> got(kNodes);
  for (int i = 0; i < kNodes; ++i) {
    threads.emplace_back([&, i] { got[i] = nodes[i]->next(node("n" + std::to_string(i)), cancel); });
  }
  for (auto& t : threads) t.join();
  for (const auto& a : got) EXPECT_EQ(a.groupWorldSize, kNodes);
  const auto size = shared->get("/ddprun.rdzv.job/" + round_keys::size(0));
  const auto claim = shared->get("/ddprun.rdzv.job/" + round_keys::closing(0));
  ASSERT_TRUE(size && claim);
  EXPECT_EQ(*size, *claim) << "the round was closed by another node than the one that claimed it";
  EXPECT_EQ(store->closes(), std::vector<bool>{true}) << "the round was closed before its assignments were written";
}

TEST(TicketRendezvousOnAFakeClock, AClaimerWhoseAssignmentsFailedToBeWrittenFinishesTheCloseOnItsRetry) {
  // The closer's MULTI_SET of the assignments fails once (a backend error): its join retries, finds its own claim
  // and writes them again; both nodes join. (Before, it waited on "size" with the other node, forever.)
  test::FakeClock clock;
  auto shared = std::make_shared<store::HashStore>();
  std::atomic<bool> failed{false};
  auto store = std::make_shared<HookedStore>(shared, [&](const char* op) {
    if (std::string(op) == "multiSet" && !failed.exchange(true)) throw store::StoreConnectionError("injected");
  });
  TicketRendezvous a(store, settingsOf(&clock, 2, 2)), b(store, settingsOf(&clock, 2, 2));
  CancelFlag cancel{false};
  auto other = std::async(std::launch::async, [&] { return b.next(node("b"), cancel); });
  auto mine = std::async(std::launch::async, [&] { return a.next(node("a"), cancel); });
  const bool done = mine.wait_for(30s) == std::future_status::ready && other.wait_for(5s) == std::future_status::ready;
  if (!done) cancel = true;  // the nodes give up (RendezvousCancelled) so that the test ends
  ASSERT_TRUE(done) << "the round never closed after its closer's failed write";
  EXPECT_TRUE(failed.load());
  EXPECT_EQ(mine.get().groupWorldSize, 2);
  EXPECT_EQ(other.get().groupWorldSize, 2);
}

TEST(NodeConnections, AClosedConnectionMarksTheNodeItHeartbeatsForAndANewHeartbeatUnmarksIt) {
  EXPECT_EQ(goneMarkFor("/ddprun.rdzv.job/alive/10.0.0.1_42"), "/ddprun.rdzv.job/gone/10.0.0.1_42");
  EXPECT_EQ(goneMarkFor("/ddprun.rdzv.a/alive/b/alive/n1"), "/ddprun.rdzv.a/alive/b/gone/n1");  // a run id with '/'
  EXPECT_EQ(goneMarkFor("/ddprun.rdzv.job/0/tickets"), std::nullopt);                           // other rendezvous ADDs
  EXPECT_EQ(goneMarkFor("/ddprun.rdzv.job/alive/"), std::nullopt);
  EXPECT_EQ(goneMarkFor("/worker/attempt_0/alive/x"), std::nullopt);  // a worker's key that looks alike
  EXPECT_EQ(goneMarkFor("counter"), std::nullopt);

  NodeConnections nodes;
  EXPECT_EQ(nodes.onAdd(7, "/ddprun.rdzv.job/0/tickets"), std::nullopt);
  EXPECT_EQ(nodes.onClose(7), std::nullopt);  // it never heartbeated: not a node's connection
  EXPECT_EQ(nodes.onAdd(8, "/ddprun.rdzv.job/alive/n1"), std::nullopt);  // nothing to unmark
  EXPECT_EQ(nodes.onAdd(8, "/ddprun.rdzv.job/alive/n1"), std::nullopt);
  EXPECT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes.onClose(8), "/ddprun.rdzv.job/gone/n1");
  EXPECT_EQ(nodes.onClose(8), std::nullopt);  // once
  // The same node heartbeats over a new connection (its store client reconnected): the mark goes.
  EXPECT_EQ(nodes.onAdd(9, "/ddprun.rdzv.job/alive/n1"), "/ddprun.rdzv.job/gone/n1");
  EXPECT_EQ(nodes.onAdd(9, "/ddprun.rdzv.job/alive/n1"), std::nullopt);
  EXPECT_EQ(nodes.size(), 1u);
  // Any request of a connection that speaks for a node counts as its heartbeat; others count for nobody.
  ASSERT_NE(nodes.onRequest(9), nullptr);
  EXPECT_EQ(*nodes.onRequest(9), "/ddprun.rdzv.job/alive/n1");
  EXPECT_EQ(nodes.onRequest(10), nullptr);
}

// --- On ddprun's real store -------------------------------------------------------------------------------

std::unique_ptr<TicketRendezvous> makeNode(uint16_t port, const std::string& runId, int minNodes, int maxNodes,
                                           std::chrono::milliseconds lastCall = 300ms,
                                           std::chrono::milliseconds joinTimeout = 20s, bool hostsStore = false) {
  auto client = std::make_shared<store::StoreClient>("127.0.0.1", port, 5s, 5s);
  DynamicRendezvousSettings settings;
  settings.runId = runId;
  settings.limits = RoundLimits{minNodes, maxNodes, lastCall.count()};
  settings.joinTimeout = joinTimeout;
  settings.closeTimeout = 5s;
  settings.liveness = LivenessSettings{200ms, 2};
  settings.hostsStore = hostsStore;
  return std::make_unique<TicketRendezvous>(std::move(client), settings);
}

TEST(TicketRendezvous, SixteenConcurrentNodesGetDistinctGroupRanksAndContiguousGlobalRanks) {
  test::RunningStore store;
  constexpr int kNodes = 16;
  CancelFlag cancel{false};
  std::vector<std::future<RoundAssignment>> joins;
  std::vector<std::unique_ptr<TicketRendezvous>> nodes;
  for (int i = 0; i < kNodes; ++i) nodes.push_back(makeNode(store.port(), "job", kNodes, kNodes));
  for (int i = 0; i < kNodes; ++i) {
    joins.push_back(std::async(
        std::launch::async, [&, i] { return nodes[i]->next(node("n" + std::to_string(100 + i), 1 + i % 3), cancel); }));
  }
  std::map<int, int> offsetByRank;
  for (auto& join : joins) {
    auto a = join.get();
    EXPECT_EQ(a.groupWorldSize, kNodes);
    offsetByRank[a.groupRank] = a.rankOffset;
  }
  ASSERT_EQ(offsetByRank.size(), static_cast<size_t>(kNodes));
  int expected = 0;
  for (int rank = 0; rank < kNodes; ++rank) {
    EXPECT_EQ(offsetByRank[rank], expected);
    expected += 1 + rank % 3;
  }
}

/// Checks `nodes` until one reports something other than kStable (or `timeout` passes); returns what it saw.
Membership checkUntilChange(const std::vector<TicketRendezvous*>& nodes, std::chrono::milliseconds timeout = 5s) {
  Membership seen = Membership::kStable;
  test::waitUntil(
      [&] {
        for (auto* n : nodes) {
          n->keepAlive();
          const auto m = n->check();
          if (m != Membership::kStable) seen = m;
        }
        return seen != Membership::kStable;
      },
      timeout);
  return seen;
}

/// The store behind it can be replaced, as when the store's host dies and comes back with an empty store.
class ReplaceableStore : public store::Store {
 public:
  explicit ReplaceableStore(std::shared_ptr<store::Store> inner) : inner_(std::move(inner)) {}
  void replace(std::shared_ptr<store::Store> next) {
    std::lock_guard<std::mutex> lock(mutex_);
    inner_ = std::move(next);
  }
  std::string describe() const override { return "replaceable in-memory store"; }
  void set(const std::string& k, const std::string& v) override { now()->set(k, v); }
  std::optional<std::string> get(const std::string& k) override { return now()->get(k); }
  std::string compareSet(const std::string& k, const std::string& e, const std::string& d) override {
    return now()->compareSet(k, e, d);
  }
  int64_t add(const std::string& k, int64_t delta) override { return now()->add(k, delta); }
  void erase(const std::string& k) override { now()->erase(k); }
  void multiSet(const std::vector<std::pair<std::string, std::string>>& entries) override { now()->multiSet(entries); }
  std::vector<std::string> multiGet(const std::vector<std::string>& keys) override { return now()->multiGet(keys); }
  bool wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    return now()->wait(keys, timeout);
  }

 private:
  std::shared_ptr<store::Store> now() {
    std::lock_guard<std::mutex> lock(mutex_);
    return inner_;
  }
  std::mutex mutex_;
  std::shared_ptr<store::Store> inner_;
};

/// An in-memory store as its host leaves it: with its id written.
std::shared_ptr<store::Store> hostedStoreWithId(const std::string& id) {
  auto s = std::make_shared<store::HashStore>();
  s->set(round_keys::prefix("job") + "/" + round_keys::storeId(), id);
  return s;
}

TEST(TicketRendezvous, AStoreThatComesBackEmptyGoesOnWithTheNextRoundNumber) {
  auto store = std::make_shared<ReplaceableStore>(hostedStoreWithId("first"));
  DynamicRendezvousSettings settings = settingsOf(nullptr, 2, 3, 300ms);
  settings.joinTimeout = 20s;
  auto a = std::make_unique<TicketRendezvous>(store, settings), b = std::make_unique<TicketRendezvous>(store, settings);
  CancelFlag cancel{false};
  auto fa = std::async(std::launch::async, [&] { return a->next(node("a"), cancel); });
  auto fb = std::async(std::launch::async, [&] { return b->next(node("b"), cancel); });
  ASSERT_EQ(fa.get().round, 0);
  ASSERT_EQ(fb.get().round, 0);
  EXPECT_EQ(a->check(), Membership::kStable);
  // The store's host died and came back: an empty store with another id. Its own node starts afresh (round 0).
  store->replace(hostedStoreWithId("second"));
  auto host = std::make_unique<TicketRendezvous>(store, settings);
  auto fhost = std::async(std::launch::async, [&] { return host->next(node("c"), cancel); });
  EXPECT_EQ(checkUntilChange({a.get()}), Membership::kNodeLost);
  EXPECT_EQ(checkUntilChange({b.get()}), Membership::kNodeLost);
  fa = std::async(std::launch::async, [&] { return a->next(node("a"), cancel); });
  fb = std::async(std::launch::async, [&] { return b->next(node("b"), cancel); });
  for (auto* f : {&fa, &fb, &fhost}) {
    const auto round = f->get();
    EXPECT_EQ(round.round, 1);  // not 0 again: TORCHELASTIC_RESTART_COUNT and attempt directories go on
    EXPECT_EQ(round.groupWorldSize, 3);
  }
}

TEST(TicketRendezvous, ARoundHintPastTheLastRoundIsIgnoredAndANewStoreIdCostsTwoWritesNotAWalk) {
  // The red team's hint of 10^12 followed by a new store id: nodes walked 10^12 rounds (and a signal did not end it).
  auto inner = hostedStoreWithId("first");
  inner->set(round_keys::prefix("job") + "/" + round_keys::roundHint(), "1000000000000");
  auto store = std::make_shared<ReplaceableStore>(inner);
  DynamicRendezvousSettings settings = settingsOf(nullptr, 2, 2, 300ms);
  settings.joinTimeout = 20s;
  TicketRendezvous a(store, settings), b(store, settings);
  CancelFlag cancel{false};
  auto fa = std::async(std::launch::async, [&] { return a.next(node("a"), cancel); });
  auto fb = std::async(std::launch::async, [&] { return b.next(node("b"), cancel); });
  EXPECT_EQ(fa.get().round, 0);
  EXPECT_EQ(fb.get().round, 0);
  auto next = hostedStoreWithId("second");
  next->set(round_keys::prefix("job") + "/" + round_keys::roundHint(), "999999999");
  store->replace(next);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(a.check(), Membership::kNodeLost);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  EXPECT_EQ(next->get(round_keys::prefix("job") + "/" + round_keys::roundHint()), "1");
}

TEST(TicketRendezvous, ALostNodeIsSeenAndTheSurvivorsFormANewRound) {
  test::RunningStore store;
  CancelFlag cancel{false};
  auto a = makeNode(store.port(), "job", 2, 3), b = makeNode(store.port(), "job", 2, 3),
       c = makeNode(store.port(), "job", 2, 3);
  auto fa = std::async(std::launch::async, [&] { return a->next(node("a"), cancel); });
  auto fb = std::async(std::launch::async, [&] { return b->next(node("b"), cancel); });
  auto fc = std::async(std::launch::async, [&] { return c->next(node("c"), cancel); });
  EXPECT_EQ(fa.get().groupWorldSize, 3);
  fb.get();
  fc.get();
  // c stops heartbeating (its agent was killed); a and b keep checking. b watches c.
  EXPECT_EQ(checkUntilChange({a.get(), b.get()}), Membership::kNodeLost);
  EXPECT_EQ(checkUntilChange({a.get()}), Membership::kNodeLost);  // the round's end reaches every node
  fa = std::async(std::launch::async, [&] { return a->next(node("a"), cancel); });
  fb = std::async(std::launch::async, [&] { return b->next(node("b"), cancel); });
  auto ra = fa.get();
  EXPECT_EQ(ra.groupWorldSize, 2);
  EXPECT_EQ(ra.round, 1);
  EXPECT_EQ(fb.get().worldSize, 2);
}

TEST(TicketRendezvous, ANodeWhoseConnectionClosesIsSeenAtTheNextCheckNotAfterTheHeartbeatTimeout) {
  test::RunningStore store;
  store.onLoop([](store::StoreServer& server) {
    watchNodeConnections(server);
    return 0;
  });
  CancelFlag cancel{false};
  // Heartbeats every 5 s, dead after 15 s (torchrun's defaults): a verdict within 5 s can only come from the
  // closed connection.
  auto make = [&] {
    auto client = std::make_shared<store::StoreClient>("127.0.0.1", store.port(), 5s, 5s);
    DynamicRendezvousSettings s;
    s.runId = "job";
    s.limits = RoundLimits{2, 3, 300};
    s.joinTimeout = 20s;
    s.closeTimeout = 5s;
    s.liveness = LivenessSettings{5000ms, 3};
    return std::make_unique<TicketRendezvous>(std::move(client), s);
  };
  auto a = make(), b = make(), c = make();
  auto fa = std::async(std::launch::async, [&] { return a->next(node("a"), cancel); });
  auto fb = std::async(std::launch::async, [&] { return b->next(node("b"), cancel); });
  auto fc = std::async(std::launch::async, [&] { return c->next(node("c"), cancel); });
  ASSERT_EQ(fa.get().groupWorldSize, 3);
  fb.get();
  fc.get();
  EXPECT_EQ(checkUntilChange({a.get(), b.get()}, 300ms), Membership::kStable);  // all alive: nothing happens
  // c's ddprun is killed: the kernel closes its connection, as destroying its client does here.
  const auto killed = std::chrono::steady_clock::now();
  c.reset();
  EXPECT_EQ(checkUntilChange({a.get(), b.get()}), Membership::kNodeLost);  // b watches c
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 2s);
  EXPECT_EQ(checkUntilChange({a.get()}), Membership::kNodeLost);
  // The survivors form round 1; a node that finishes and then closes its connection is no loss to anyone.
  fa = std::async(std::launch::async, [&] { return a->next(node("a"), cancel); });
  fb = std::async(std::launch::async, [&] { return b->next(node("b"), cancel); });
  EXPECT_EQ(fa.get().round, 1);
  EXPECT_EQ(fb.get().groupWorldSize, 2);
  b->finish(NodeOutcome::kSucceeded, cancel);
  b.reset();
  EXPECT_EQ(checkUntilChange({a.get()}, 500ms), Membership::kStable);
}

/// Two nodes checking every 20 ms for 3 s (keep_alive_interval 0.2 s, dead after 0.6 s), each on its own
/// `backend()`; returns the ADDs (heartbeats) each sent meanwhile. Nobody may be judged dead.
std::pair<int, int> heartbeatAddsWhileChecking(const std::function<std::shared_ptr<store::Store>()>& backend) {
  std::atomic<int> addsA{0}, addsB{0};
  auto make = [&](std::atomic<int>& adds) {
    auto counted = std::make_shared<HookedStore>(backend(), [&adds](const char* op) {
      if (std::string(op) == "add") ++adds;
    });
    DynamicRendezvousSettings s = settingsOf(nullptr, 2, 2, 300ms);
    s.liveness = LivenessSettings{200ms, 3};
    return std::make_unique<TicketRendezvous>(counted, s);
  };
  auto a = make(addsA), b = make(addsB);
  CancelFlag cancel{false};
  auto fa = std::async(std::launch::async, [&] { return a->next(node("a"), cancel); });
  b->next(node("b"), cancel);
  fa.get();
  addsA = 0;
  addsB = 0;
  const auto until = std::chrono::steady_clock::now() + 3s;
  while (std::chrono::steady_clock::now() < until) {
    EXPECT_EQ(a->check(), Membership::kStable);
    EXPECT_EQ(b->check(), Membership::kStable);
    a->keepAlive();  // the session's heartbeat timer
    b->keepAlive();
    std::this_thread::sleep_for(20ms);
  }
  return {addsA.load(), addsB.load()};
}

TEST(TicketRendezvous, OnDdprunsStoreANodesChecksAreItsHeartbeatsElsewhereItAddsEveryInterval) {
  test::RunningStore store;
  store.onLoop([](store::StoreServer& server) {
    watchNodeConnections(server);
    return 0;
  });
  auto counted = heartbeatAddsWhileChecking(
      [&] { return std::make_shared<store::StoreClient>("127.0.0.1", store.port(), 5s, 5s); });
  // The host counts every request of a node's connection: after the one ADD that shows it does, none is needed.
  EXPECT_LE(counted.first, 1);
  EXPECT_LE(counted.second, 1);
  // A store that does not count requests (the in-memory one here, etcd in production): an ADD every interval.
  auto memory = std::make_shared<store::HashStore>();
  auto plain = heartbeatAddsWhileChecking([&] { return memory; });
  EXPECT_GE(plain.first, 10);
  EXPECT_GE(plain.second, 10);
}

TEST(TicketRendezvous, ANodeThatDiedAfterTakingItsTicketIsNotCountedInTheRoundItJoined) {
  test::RunningStore store;
  store.onLoop([](store::StoreServer& server) {
    watchNodeConnections(server);
    return 0;
  });
  {
    // Node "c" takes ticket 1 and writes its record, heartbeats once, and dies (its connection closes).
    store::StoreClient c("127.0.0.1", store.port(), 5s, 5s);
    const std::string p = round_keys::prefix("job") + "/";
    const int64_t ticket = c.add(p + round_keys::tickets(0), 1);
    c.set(p + round_keys::node(0, ticket), encodeRecord(node("c")));
    c.add(p + round_keys::alive("c"), 1);
  }
  CancelFlag cancel{false};
  auto a = makeNode(store.port(), "job", 2, 3), b = makeNode(store.port(), "job", 2, 3);
  auto fa = std::async(std::launch::async, [&] { return a->next(node("a"), cancel); });
  const auto rb = b->next(node("b"), cancel);
  const auto ra = fa.get();
  // Round 0 (a, b and the dead c) ends when it closes; a and b form round 1 without it.
  EXPECT_EQ(ra.round, 1);
  EXPECT_EQ(ra.groupWorldSize, 2);
  EXPECT_EQ(rb.groupWorldSize, 2);
}

TEST(TicketRendezvous, ALateNodeWaitsAndTheRunningNodesTakeItInAtTheirNextCheck) {
  test::RunningStore store;
  CancelFlag cancel{false};
  auto a = makeNode(store.port(), "job", 2, 3), b = makeNode(store.port(), "job", 2, 3),
       late = makeNode(store.port(), "job", 2, 3);
  auto fa = std::async(std::launch::async, [&] { return a->next(node("a"), cancel); });
  auto fb = std::async(std::launch::async, [&] { return b->next(node("b"), cancel); });
  EXPECT_EQ(fa.get().groupWorldSize, 2);  // MIN reached, last call (300 ms) passed
  fb.get();
  auto fl = std::async(std::launch::async, [&] { return late->next(node("late"), cancel); });
  EXPECT_EQ(checkUntilChange({a.get()}), Membership::kNodesWaiting);
  EXPECT_EQ(checkUntilChange({b.get()}), Membership::kNodesWaiting);
  fa = std::async(std::launch::async, [&] { return a->next(node("a"), cancel); });
  fb = std::async(std::launch::async, [&] { return b->next(node("b"), cancel); });
  EXPECT_EQ(fl.get().groupWorldSize, 3);
  EXPECT_EQ(fa.get().groupWorldSize, 3);
  EXPECT_EQ(fb.get().round, 1);
}

TEST(TicketRendezvous, AFullRoundMakesALateNodeWaitWithoutEndingIt) {
  test::RunningStore store;
  CancelFlag cancel{false}, cancelLate{false};
  auto a = makeNode(store.port(), "job", 1, 2), b = makeNode(store.port(), "job", 1, 2),
       late = makeNode(store.port(), "job", 1, 2);
  auto fa = std::async(std::launch::async, [&] { return a->next(node("a"), cancel); });
  EXPECT_EQ(b->next(node("b"), cancel).groupWorldSize, 2);  // MAX: complete at once
  fa.get();
  auto fl = std::async(std::launch::async, [&] { return late->next(node("late"), cancelLate); });
  // a and b stay alive (the late node watches the round's first node) for longer than the liveness expiry.
  const auto until = std::chrono::steady_clock::now() + 600ms;
  while (std::chrono::steady_clock::now() < until) {
    a->keepAlive();
    b->keepAlive();
    ASSERT_EQ(fl.wait_for(20ms), std::future_status::timeout);
  }
  EXPECT_EQ(a->check(), Membership::kStable);  // no room: the running round goes on
  cancelLate = true;
  EXPECT_THROW(fl.get(), RendezvousCancelled);
  EXPECT_EQ(b->check(), Membership::kStable);  // a stopped late node does not end the round it waited for
}

TEST(TicketRendezvous, TooFewNodesTimeOutNamingTheCountsAndAClosedJobRefusesNewNodes) {
  test::RunningStore store;
  CancelFlag cancel{false};
  auto lonely = makeNode(store.port(), "job", 2, 2, 300ms, 700ms);
  try {
    lonely->next(node("a"), cancel);
    FAIL() << "expected a timeout";
  } catch (const RendezvousTimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("1 node(s) joined, at least 2 needed"), std::string::npos) << e.what();
  }
  auto a = makeNode(store.port(), "job2", 1, 2, 100ms);
  a->next(node("a"), cancel);
  a->finish(NodeOutcome::kSucceeded, cancel);
  auto late = makeNode(store.port(), "job2", 1, 2);
  EXPECT_THROW(late->next(node("late"), cancel), RendezvousClosedError);
}

TEST(TicketRendezvous, ANodeThatGivesUpClosesTheJobAndTheOthersFailFast) {
  test::RunningStore store;
  CancelFlag cancel{false};
  auto a = makeNode(store.port(), "job", 1, 2, 100ms), b = makeNode(store.port(), "job", 1, 2, 100ms);
  auto fa = std::async(std::launch::async, [&] { return a->next(node("a"), cancel); });
  b->next(node("b"), cancel);
  fa.get();
  b->finish(NodeOutcome::kFailed, cancel);  // no restarts left on b
  try {
    a->next(node("a"), cancel);
    FAIL() << "expected the rendezvous to be closed";
  } catch (const RendezvousClosedError& e) {
    EXPECT_NE(std::string(e.what()).find("another node ended the job"), std::string::npos) << e.what();
  }
}

TEST(TicketRendezvous, ANodeStoppedWhileJoiningLeavesNoGhost) {
  test::RunningStore store;
  CancelFlag cancelA{false}, cancel{false};
  auto a = makeNode(store.port(), "job", 3, 3), b = makeNode(store.port(), "job", 3, 3),
       c = makeNode(store.port(), "job", 3, 3), d = makeNode(store.port(), "job", 3, 3);
  auto fa = std::async(std::launch::async, [&] { return a->next(node("a"), cancelA); });
  auto fb = std::async(std::launch::async, [&] { return b->next(node("b"), cancel); });
  store::StoreClient observer("127.0.0.1", store.port(), 5s, 5s);
  ASSERT_TRUE(test::waitUntil([&] { return observer.add("/ddprun.rdzv.job/r0/tickets", 0) == 2; }, 30s));
  cancelA = true;  // SIGTERM to a's ddprun
  EXPECT_THROW(fa.get(), RendezvousCancelled);
  auto fc = std::async(std::launch::async, [&] { return c->next(node("c"), cancel); });
  // b and c alone are not 3 nodes: the round must not complete with a's ghost.
  EXPECT_EQ(fc.wait_for(500ms), std::future_status::timeout);
  auto rd = d->next(node("d"), cancel);
  EXPECT_EQ(rd.groupWorldSize, 3);
  EXPECT_EQ(fb.get().groupRank, 0);  // b, c, d: a is gone
  EXPECT_EQ(fc.get().groupRank, 1);
}

TEST(TicketRendezvous, TheStoreHostWaitsForTheOthersToFinishAndASignalEndsTheWait) {
  test::RunningStore store;
  CancelFlag cancel{false};
  auto host = makeNode(store.port(), "job", 2, 2, 100ms, 20s, /*hostsStore=*/true);
  auto other = makeNode(store.port(), "job", 2, 2);
  auto fh = std::async(std::launch::async, [&] { return host->next(node("host"), cancel); });
  other->next(node("other"), cancel);
  fh.get();
  // The other node finishes 300 ms after the host: the host's finish returns only then.
  auto finished = std::async(std::launch::async, [&] { host->finish(NodeOutcome::kSucceeded, cancel); });
  EXPECT_EQ(finished.wait_for(300ms), std::future_status::timeout);
  other->finish(NodeOutcome::kSucceeded, cancel);
  EXPECT_EQ(finished.wait_for(5s), std::future_status::ready);
  // Another job: the other node never finishes; a signal cuts the host's wait (close_timeout 5 s) short.
  auto host2 = makeNode(store.port(), "job2", 2, 2, 100ms, 20s, true);
  auto other2 = makeNode(store.port(), "job2", 2, 2);
  auto fh2 = std::async(std::launch::async, [&] { return host2->next(node("host"), cancel); });
  other2->next(node("other"), cancel);
  fh2.get();
  CancelFlag signal{false};
  const auto start = std::chrono::steady_clock::now();
  auto waiting = std::async(std::launch::async, [&] { host2->finish(NodeOutcome::kSucceeded, signal); });
  EXPECT_EQ(waiting.wait_for(300ms), std::future_status::timeout);
  signal = true;
  EXPECT_EQ(waiting.wait_for(2s), std::future_status::ready);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 4s);
}

TEST(TicketRendezvous, ALostStoreIsReported) {
  auto store = std::make_unique<test::RunningStore>();
  CancelFlag cancel{false};
  auto a = makeNode(store->port(), "job", 1, 1);
  a->next(node("a"), cancel);
  store.reset();
  try {
    const auto start = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - start < 10s) {
      a->check();
      std::this_thread::sleep_for(50ms);
    }
    FAIL() << "the lost store was never reported";
  } catch (const RendezvousBackendError& e) {
    EXPECT_NE(std::string(e.what()).find("lost the rendezvous backend"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("c10d store at 127.0.0.1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ddprun::rendezvous
