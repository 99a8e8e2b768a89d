// The dynamic rendezvous: its state transitions (PyTorch dynamic_rendezvous.py semantics) without I/O; its
// timeout rules against the in-memory store and a fake clock (no sleeps, no wall time); then many nodes
// joining concurrently through ddprun's real store, node loss, scale-up, timeouts and closing.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <set>
#include <thread>

#include "rendezvous/c10d_backend.hpp"
#include "rendezvous/dynamic_rendezvous.hpp"
#include "rendezvous/rendezvous_state.hpp"
#include "rendezvous/static_rendezvous.hpp"
#include "store/hash_store.hpp"
#include "store/store_client.hpp"
#include "store/store_errors.hpp"
#include "support/child_process.hpp"
#include "support/fake_clock.hpp"
#include "support/store_fixture.hpp"
#include "support/wait_until.hpp"

namespace ddprun::rendezvous {
namespace {
using namespace std::chrono_literals;

NodeDescriptor node(const std::string& id, int nproc = 1) {
  return NodeDescriptor{id, "addr-" + id, nproc, "store-" + id, 1000 + static_cast<int>(id.size())};
}

TEST(RendezvousState, RoundCompletesAtMaxAtOnceAndRanksFollowNodeIdOrder) {
  RendezvousState s;
  RoundLimits limits{2, 3, 30000};
  addParticipant(s, "c", node("c", 2), limits, 0);
  EXPECT_FALSE(s.deadlineMs);
  addParticipant(s, "a", node("a", 1), limits, 100);
  ASSERT_TRUE(s.deadlineMs);
  EXPECT_EQ(*s.deadlineMs, 30100);  // MIN reached: last call
  EXPECT_FALSE(s.complete);
  addParticipant(s, "b", node("b", 4), limits, 200);
  EXPECT_TRUE(s.complete);  // MAX reached
  EXPECT_EQ(s.participants.at("a").rank, 0);
  EXPECT_EQ(s.participants.at("b").rank, 1);
  EXPECT_EQ(s.participants.at("c").rank, 2);
  auto c = assignmentOf(s, "c");
  EXPECT_EQ(c.groupRank, 2);
  EXPECT_EQ(c.rankOffset, 5);  // a has 1, b has 4
  EXPECT_EQ(c.worldSize, 7);
  EXPECT_EQ(c.masterAddr, "store-a");
}

TEST(RendezvousState, JoinActionsFollowTorchsJoinOp) {
  RoundLimits limits{2, 3, 1000};
  RendezvousState s;
  EXPECT_EQ(nextJoinAction(s, "a", limits, 0), JoinAction::kAddToParticipants);
  addParticipant(s, "a", node("a"), limits, 0);
  EXPECT_EQ(nextJoinAction(s, "a", limits, 0), JoinAction::kWait);  // below MIN
  addParticipant(s, "b", node("b"), limits, 0);
  EXPECT_EQ(nextJoinAction(s, "a", limits, 999), JoinAction::kWait);  // last call still open
  EXPECT_EQ(nextJoinAction(s, "a", limits, 1000), JoinAction::kMarkComplete);
  markComplete(s);
  EXPECT_EQ(nextJoinAction(s, "a", limits, 1000), JoinAction::kFinish);
  EXPECT_EQ(nextJoinAction(s, "late", limits, 1000), JoinAction::kAddToWaitList);
  s.waitList["late"] = NodeRecord{};
  EXPECT_EQ(nextJoinAction(s, "late", limits, 1000), JoinAction::kWait);
}

TEST(RendezvousState, LosingEveryParticipantOfACompleteRoundOpensTheNextRound) {
  RoundLimits limits{1, 2, 0};
  RendezvousState s;
  addParticipant(s, "a", node("a"), limits, 0);
  addParticipant(s, "b", node("b"), limits, 0);
  ASSERT_TRUE(s.complete);
  s.finished.insert("a");
  removeParticipant(s, "a", limits);
  EXPECT_TRUE(s.complete);
  EXPECT_EQ(s.round, 0);
  EXPECT_TRUE(removeDeadNodes(s, {"b"}, limits));
  EXPECT_FALSE(s.complete);
  EXPECT_EQ(s.round, 1);
  EXPECT_TRUE(s.participants.empty());
  EXPECT_TRUE(s.finished.empty());
}

TEST(RendezvousState, DroppingBelowMinClearsTheLastCallDeadlineAndFinishedNodesAreNotDead) {
  RoundLimits limits{2, 4, 500};
  RendezvousState s;
  addParticipant(s, "a", node("a"), limits, 0);
  addParticipant(s, "b", node("b"), limits, 0);
  ASSERT_TRUE(s.deadlineMs);
  removeParticipant(s, "b", limits);
  EXPECT_FALSE(s.deadlineMs);
  s.finished.insert("a");
  EXPECT_FALSE(removeDeadNodes(s, {"a"}, limits));
  EXPECT_EQ(s.participants.count("a"), 1u);
}

TEST(RendezvousState, EncodesAndDecodesLosslesslyAndRejectsForeignText) {
  RoundLimits limits{1, 3, 100};
  RendezvousState s;
  s.round = 4;
  s.writes = 17;
  addParticipant(s, "x", node("x", 3), limits, 5);
  s.waitList["w"] = NodeRecord{"addr", 2, "h", 7, -1};
  s.finished.insert("x");
  s.closed = true;
  const auto back = decodeState(encodeState(s));
  EXPECT_EQ(encodeState(back), encodeState(s));
  EXPECT_EQ(back.participants.at("x").nproc, 3);
  EXPECT_EQ(*back.deadlineMs, 105);
  EXPECT_THROW(decodeState("gASVAAAA"), RendezvousBackendError);
  EXPECT_THROW(decodeState("{\"round\": 1}"), RendezvousBackendError);
}

/// The in-memory store with a hook before every operation (to make the backend slow, down, or to act
/// while a node waits), for single-threaded tests on a fake clock.
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

/// One node on `store` and `clock`: join_timeout 600 s, liveness 5 s x 3, as torchrun's defaults.
std::unique_ptr<DynamicRendezvous> fakeTimeNode(std::shared_ptr<store::Store> store, test::FakeClock& clock,
                                                int minNodes, int maxNodes) {
  LivenessSettings liveness{5s, 3};
  DynamicRendezvousSettings settings;
  settings.runId = "job";
  settings.limits = RoundLimits{minNodes, maxNodes, 30000};
  settings.joinTimeout = 600s;
  settings.closeTimeout = 30s;
  settings.liveness = liveness;
  settings.clock = &clock;
  return std::make_unique<DynamicRendezvous>(
      std::make_unique<C10dRendezvousBackend>(std::move(store), "job", liveness, clock), settings);
}

TEST(DynamicRendezvousOnAFakeClock, TooFewNodesTimeOutAtJoinTimeout) {
  test::FakeClock clock;
  auto store = std::make_shared<store::HashStore>(clock);
  auto a = fakeTimeNode(store, clock, 2, 2);
  std::atomic<bool> cancel{false};
  const auto start = clock.now();
  try {
    a->next(node("a"), cancel);
    FAIL() << "expected a timeout";
  } catch (const RendezvousTimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("1 node(s) joined, at least 2 needed"), std::string::npos) << e.what();
  }
  EXPECT_GE(clock.now() - start, 600s);
  EXPECT_LE(clock.now() - start, 602s);
  // It left the round on its way out.
  EXPECT_TRUE(decodeState(*store->get("/ddprun.rdzv.job/state")).participants.empty());
}

TEST(DynamicRendezvousOnAFakeClock, LeavingTheLastRoundAndJoiningTheNextShareOneJoinTimeout) {
  // Round 0 is complete with a and b. b dies; a leaves round 0 through a backend that takes 400 s to
  // answer, then waits for a second node that never comes. torch counts join_timeout once for the whole
  // call: the timeout comes 600 s after the call began, not 400 + 600.
  test::FakeClock clock;
  auto shared = std::make_shared<store::HashStore>(clock);
  RendezvousState seeded;
  addParticipant(seeded, "b", node("b"), RoundLimits{2, 2, 30000}, clock.wallMs());
  shared->set("/ddprun.rdzv.job/state", encodeState(seeded));
  bool slow = false;
  auto store = std::make_shared<HookedStore>(shared, [&](const char* op) {
    if (slow && std::string(op) == "compareSet") {
      clock.advance(400s);
      slow = false;
    }
  });
  auto a = fakeTimeNode(store, clock, 2, 2);
  std::atomic<bool> cancel{false};
  EXPECT_EQ(a->next(node("a"), cancel).groupWorldSize, 2);
  slow = true;
  const auto start = clock.now();
  EXPECT_THROW(a->next(node("a"), cancel), RendezvousTimeoutError);
  EXPECT_GE(clock.now() - start, 600s);
  EXPECT_LE(clock.now() - start, 602s) << "join_timeout was counted twice";
}

TEST(DynamicRendezvousOnAFakeClock, ALostBackendIsReportedAfterTheLivenessExpiryNotBefore) {
  test::FakeClock clock;
  bool down = false;
  auto store = std::make_shared<HookedStore>(std::make_shared<store::HashStore>(clock), [&](const char*) {
    if (down) throw store::StoreConnectionError("hooked in-memory store: connection refused");
  });
  auto a = fakeTimeNode(store, clock, 1, 1);
  std::atomic<bool> cancel{false};
  a->next(node("a"), cancel);
  down = true;
  for (int second = 0; second < 14; ++second) {
    EXPECT_NO_THROW(a->check()) << "reported lost after " << second << " s";
    clock.advance(1s);
  }
  clock.advance(1s);  // 15 s = keep_alive_interval x keep_alive_max_attempt
  try {
    a->check();
    FAIL() << "the lost backend was never reported";
  } catch (const RendezvousBackendError& e) {
    EXPECT_NE(std::string(e.what()).find("lost the rendezvous backend"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("connection refused"), std::string::npos) << e.what();
  }
}

TEST(DynamicRendezvousOnAFakeClock, ACancelWhileWaitingEndsTheJoinAndLeavesNoGhost) {
  test::FakeClock clock;
  auto shared = std::make_shared<store::HashStore>(clock);
  std::atomic<bool> cancel{false};
  auto store = std::make_shared<HookedStore>(shared, [&](const char* op) {
    if (std::string(op) == "wait") cancel = true;  // SIGTERM while the node waits for others
  });
  auto a = fakeTimeNode(store, clock, 2, 2);
  const auto start = clock.now();
  EXPECT_THROW(a->next(node("a"), cancel), RendezvousCancelled);
  EXPECT_LE(clock.now() - start, 2s);
  EXPECT_TRUE(decodeState(*shared->get("/ddprun.rdzv.job/state")).participants.empty());
}

TEST(DynamicRendezvousOnAFakeClock, AFullRoundOfDeadNodesMakesRoomOnlyAfterTheLivenessExpiry) {
  // Round 0 is full (b and c, MAX 2) and neither heartbeats. a waits without room; only after the liveness
  // expiry does its sweep remove them, and a forms round 1 alone (MIN 1) after the last call.
  test::FakeClock clock;
  auto shared = std::make_shared<store::HashStore>(clock);
  RendezvousState seeded;
  addParticipant(seeded, "b", node("b"), RoundLimits{2, 2, 30000}, clock.wallMs());
  addParticipant(seeded, "c", node("c"), RoundLimits{2, 2, 30000}, clock.wallMs());
  shared->set("/ddprun.rdzv.job/state", encodeState(seeded));
  auto a = fakeTimeNode(shared, clock, 1, 2);
  std::atomic<bool> cancel{false};
  const auto assignment = a->next(node("a"), cancel);  // b and c never heartbeat: both are dropped
  EXPECT_EQ(assignment.round, 1);
  EXPECT_EQ(assignment.groupWorldSize, 1);
  EXPECT_GE(clock.slept(), 15s);  // not before the liveness expiry
}

/// A node of a dynamic rendezvous on the test store, like one ddprun agent.
std::unique_ptr<DynamicRendezvous> makeNode(uint16_t port, const std::string& runId, int minNodes, int maxNodes,
                                            std::chrono::milliseconds lastCall = 300ms,
                                            std::chrono::milliseconds joinTimeout = 20s) {
  auto client = std::make_shared<store::StoreClient>("127.0.0.1", port, 5s, 5s);
  LivenessSettings liveness{200ms, 2};
  DynamicRendezvousSettings settings;
  settings.runId = runId;
  settings.limits = RoundLimits{minNodes, maxNodes, lastCall.count()};
  settings.joinTimeout = joinTimeout;
  settings.closeTimeout = 5s;
  settings.liveness = liveness;
  return std::make_unique<DynamicRendezvous>(
      std::make_unique<C10dRendezvousBackend>(std::move(client), runId, liveness), settings);
}

TEST(DynamicRendezvous, SixteenConcurrentNodesGetDistinctGroupRanksAndContiguousGlobalRanks) {
  test::RunningStore store;
  constexpr int kNodes = 16;
  std::atomic<bool> cancel{false};
  std::vector<std::future<RoundAssignment>> joins;
  std::vector<std::unique_ptr<DynamicRendezvous>> nodes;
  for (int i = 0; i < kNodes; ++i) nodes.push_back(makeNode(store.port(), "job", kNodes, kNodes));
  for (int i = 0; i < kNodes; ++i) {
    joins.push_back(std::async(
        std::launch::async, [&, i] { return nodes[i]->next(node("n" + std::to_string(100 + i), 1 + i % 3), cancel); }));
  }
  std::set<int> groupRanks;
  std::map<int, int> offsetByRank;
  int worldSize = 0;
  for (int i = 0; i < kNodes; ++i) worldSize += 1 + i % 3;
  for (auto& join : joins) {
    auto a = join.get();
    EXPECT_EQ(a.groupWorldSize, kNodes);
    EXPECT_EQ(a.worldSize, worldSize);
    groupRanks.insert(a.groupRank);
    offsetByRank[a.groupRank] = a.rankOffset;
  }
  EXPECT_EQ(groupRanks.size(), static_cast<size_t>(kNodes));
  // Node n100+i has 1 + i%3 workers and group rank i (ids sort in index order): offsets are the prefix sums.
  int expected = 0;
  for (int rank = 0; rank < kNodes; ++rank) {
    EXPECT_EQ(offsetByRank[rank], expected);
    expected += 1 + rank % 3;
  }
}

TEST(DynamicRendezvous, ALostNodeIsSeenAndTheSurvivorsFormANewRound) {
  test::RunningStore store;
  std::atomic<bool> cancel{false};
  auto a = makeNode(store.port(), "job", 2, 3), b = makeNode(store.port(), "job", 2, 3),
       c = makeNode(store.port(), "job", 2, 3);
  auto fa = std::async(std::launch::async, [&] { return a->next(node("a"), cancel); });
  auto fb = std::async(std::launch::async, [&] { return b->next(node("b"), cancel); });
  auto fc = std::async(std::launch::async, [&] { return c->next(node("c"), cancel); });
  EXPECT_EQ(fa.get().groupWorldSize, 3);
  fb.get();
  fc.get();
  // c stops heartbeating (its agent was killed); a and b keep checking.
  Membership seen = Membership::kStable;
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (seen == Membership::kStable && std::chrono::steady_clock::now() < deadline) {
    seen = a->check();
    b->check();
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(seen, Membership::kNodeLost);
  fa = std::async(std::launch::async, [&] { return a->next(node("a"), cancel); });
  fb = std::async(std::launch::async, [&] { return b->next(node("b"), cancel); });
  auto ra = fa.get();
  EXPECT_EQ(ra.groupWorldSize, 2);
  EXPECT_EQ(ra.round, 1);
  EXPECT_EQ(fb.get().worldSize, 2);
}

TEST(DynamicRendezvous, ALateNodeWaitsAndTheRunningNodesTakeItInAtTheirNextCheck) {
  test::RunningStore store;
  std::atomic<bool> cancel{false};
  auto a = makeNode(store.port(), "job", 2, 3), b = makeNode(store.port(), "job", 2, 3),
       late = makeNode(store.port(), "job", 2, 3);
  auto fa = std::async(std::launch::async, [&] { return a->next(node("a"), cancel); });
  auto fb = std::async(std::launch::async, [&] { return b->next(node("b"), cancel); });
  EXPECT_EQ(fa.get().groupWorldSize, 2);  // MIN reached, last call (300 ms) passed
  fb.get();
  auto fl = std::async(std::launch::async, [&] { return late->next(node("late"), cancel); });
  Membership seen = Membership::kStable;
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (seen == Membership::kStable && std::chrono::steady_clock::now() < deadline) {
    seen = a->check();
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(seen, Membership::kNodesWaiting);
  fa = std::async(std::launch::async, [&] { return a->next(node("a"), cancel); });
  fb = std::async(std::launch::async, [&] { return b->next(node("b"), cancel); });
  EXPECT_EQ(fl.get().groupWorldSize, 3);
  EXPECT_EQ(fa.get().groupWorldSize, 3);
  EXPECT_EQ(fb.get().round, 1);
}

TEST(DynamicRendezvous, TooFewNodesTimeOutNamingTheCountsAndAClosedJobRefusesNewNodes) {
  test::RunningStore store;
  std::atomic<bool> cancel{false};
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

TEST(DynamicRendezvous, ANodeThatGivesUpClosesTheJobAndTheOthersFailFast) {
  test::RunningStore store;
  std::atomic<bool> cancel{false};
  auto a = makeNode(store.port(), "job", 1, 2, 100ms), b = makeNode(store.port(), "job", 1, 2, 100ms);
  auto fa = std::async(std::launch::async, [&] { return a->next(node("a"), cancel); });
  b->next(node("b"), cancel);
  fa.get();
  b->finish(NodeOutcome::kFailed, cancel);  // no restarts left on b
  try {
    a->next(node("a"), cancel);  // a would restart: the job is over instead
    FAIL() << "expected the rendezvous to be closed";
  } catch (const RendezvousClosedError& e) {
    EXPECT_NE(std::string(e.what()).find("another node ended the job"), std::string::npos) << e.what();
  }
}

TEST(DynamicRendezvous, ANodeStoppedWhileJoiningLeavesNoGhostParticipant) {
  test::RunningStore store;
  std::atomic<bool> cancelA{false}, cancel{false};
  auto a = makeNode(store.port(), "job", 3, 3), b = makeNode(store.port(), "job", 3, 3),
       c = makeNode(store.port(), "job", 3, 3), d = makeNode(store.port(), "job", 3, 3);
  auto fa = std::async(std::launch::async, [&] { return a->next(node("a"), cancelA); });
  auto fb = std::async(std::launch::async, [&] { return b->next(node("b"), cancel); });
  // Both have joined the round (the state in the store names them) before a is stopped.
  C10dRendezvousBackend observer(std::make_shared<store::StoreClient>("127.0.0.1", store.port(), 5s, 5s), "job",
                                 LivenessSettings{200ms, 2});
  const auto joined = [&] {
    const auto state = observer.getState();
    return state.value && decodeState(*state.value).participants.size() == 2;
  };
  ASSERT_TRUE(test::waitUntil(joined, 30s));
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

TEST(DynamicRendezvous, ALostStoreIsReported) {
  auto store = std::make_unique<test::RunningStore>();
  std::atomic<bool> cancel{false};
  auto a = makeNode(store->port(), "job", 1, 1);
  a->next(node("a"), cancel);
  store.reset();
  const auto start = std::chrono::steady_clock::now();
  try {
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

TEST(StaticRendezvous, NodesExchangeTheirWorkerCountsForContiguousRanks) {
  test::RunningStore store;
  std::atomic<bool> cancel{false};
  auto make = [&](int rank) {
    StaticRendezvousSettings settings{"job", 3, rank, "master", 4242, 10s, 5s};
    return std::make_unique<StaticRendezvous>(std::make_shared<store::StoreClient>("127.0.0.1", store.port(), 5s, 5s),
                                              settings);
  };
  auto n0 = make(0), n1 = make(1), n2 = make(2);
  auto f2 = std::async(std::launch::async, [&] { return n2->next(node("c", 1), cancel); });
  auto f0 = std::async(std::launch::async, [&] { return n0->next(node("a", 2), cancel); });
  auto r1 = n1->next(node("b", 3), cancel);
  auto r0 = f0.get(), r2 = f2.get();
  EXPECT_EQ(r0.rankOffset, 0);
  EXPECT_EQ(r1.rankOffset, 2);
  EXPECT_EQ(r2.rankOffset, 5);
  EXPECT_EQ(r2.worldSize, 6);
  EXPECT_EQ(r1.masterAddr, "master");
  EXPECT_EQ(r1.masterPort, 4242);
}

TEST(StaticRendezvous, RunsOnTheInMemoryStoreWithoutSockets) {
  auto shared = std::make_shared<store::HashStore>();
  std::atomic<bool> cancel{false};
  StaticRendezvousSettings settings0{"job", 2, 0, "master", 4242, 10s, 5s}, settings1 = settings0;
  settings1.nodeRank = 1;
  StaticRendezvous n0(shared, settings0), n1(shared, settings1);
  auto f0 = std::async(std::launch::async, [&] { return n0.next(node("a", 3), cancel); });
  const auto r1 = n1.next(node("b", 2), cancel);
  EXPECT_EQ(f0.get().worldSize, 5);
  EXPECT_EQ(r1.rankOffset, 3);
  EXPECT_EQ(shared->get("/ddprun.static.job/round/0/nproc/1"), "2");  // its keys, under its prefix
}

TEST(StaticRendezvous, TwoNodesWithTheSameNodeRankAreToldSo) {
  test::RunningStore store;
  std::atomic<bool> cancel{false};
  StaticRendezvousSettings settings{"job", 2, 1, "master", 4242, 2s, 1s};
  StaticRendezvous first(std::make_shared<store::StoreClient>("127.0.0.1", store.port(), 5s, 5s), settings);
  StaticRendezvous second(std::make_shared<store::StoreClient>("127.0.0.1", store.port(), 5s, 5s), settings);
  auto f = std::async(std::launch::async, [&] { return first.next(node("a"), cancel); });
  // first has claimed node rank 1 and announced its worker count: both keys are in the store.
  ASSERT_TRUE(test::waitUntil([&] { return store.keyCount() >= 2; }, 30s));
  try {
    second.next(node("b"), cancel);
    FAIL() << "a second node rank 1 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--node-rank 1 is already taken by node a"), std::string::npos) << e.what();
  }
  EXPECT_THROW(f.get(), RendezvousTimeoutError);  // node 0 never came
}

}  // namespace
}  // namespace ddprun::rendezvous
