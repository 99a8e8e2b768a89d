// Rank replacement's store side: the claim, the wait for "formed" and the lane that keeps every store call off the
// agent's loop, against the in-memory store and a store that answers slowly.
#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <thread>

#include "common/rank_replacement_keys.hpp"
#include "launcher/replacement/replacement_protocol.hpp"
#include "launcher/replacement/store_lane.hpp"
#include "store/hash_store.hpp"
#include "store/store_client.hpp"
#include "store/store_server.hpp"
#include "support/wait_until.hpp"

namespace ddprun::launcher {
namespace {

using namespace std::chrono_literals;

TEST(ReplacementProtocol, OneClaimAtATimeInTheJobEachWithTheNextGeneration) {
  store::HashStore store;
  // A rank that fails before the group formed: replaced into generation 1, it would wait alone while the survivors
  // still form generation 0 (until the worker's --timeout). Refused, the lock free again: the group restarts.
  const auto early = claimReplacement(store, 2, "node-a_1 rank 3", 3);
  EXPECT_EQ(early.refusal, "the ranks had not formed their group yet (generation 0)");
  EXPECT_EQ(store.get(attemptKey(2, kReplacingKey)).value_or(""), "") << "the lock is free again";
  EXPECT_FALSE(store.get(attemptKey(2, generationKey(1))).has_value()) << "nothing announced";
  store.set(attemptKey(2, generationFormedKey(0)), "1");  // rank 0 made the first group
  store.set(attemptKey(3, generationFormedKey(0)), "1");
  const auto first = claimReplacement(store, 2, "node-a_1 rank 3", 3);
  EXPECT_EQ(first.refusal, "");
  EXPECT_EQ(first.generation, 1);
  EXPECT_EQ(store.get(attemptKey(2, generationKey(1))), "3") << "the key the survivors wait for";
  const auto second = claimReplacement(store, 2, "node-b_7 rank 5", 5);
  EXPECT_EQ(second.refusal, "another replacement is forming (node-a_1 rank 3)");
  // Formed: the lock is freed and the next claim gets the next generation.
  store.set(attemptKey(2, generationFormedKey(1)), "1");
  std::atomic<int> wanted{1};
  EXPECT_TRUE(awaitFormed(store, 2, 1, "node-a_1 rank 3", 10ms, wanted));
  const auto third = claimReplacement(store, 2, "node-b_7 rank 5", 5);
  EXPECT_EQ(third.refusal, "");
  EXPECT_EQ(third.generation, 2);
  EXPECT_EQ(claimReplacement(store, 3, "node-b_7 rank 5", 5).generation, 1) << "each attempt counts on its own";
}

TEST(ReplacementProtocol, AGenerationWhoseCollectiveTimedOutIsRestartedNotReplaced) {
  // A rank frozen with SIGSTOP: the survivors' collective times out and no rank exited. The first survivor to exit
  // said so; replacing it would only form a generation that waits for the frozen rank again.
  store::HashStore store;
  store.set(attemptKey(0, generationFormedKey(0)), "1");
  store.set(attemptKey(0, generationTimedOutKey(0)), "2");
  const auto claim = claimReplacement(store, 0, "node-a_1 rank 2", 2);
  EXPECT_EQ(claim.refusal,
            "rank 2 saw a collective of generation 0 time out with no rank lost (a rank stopped, hung or "
            "unreachable?)");
  EXPECT_EQ(store.get(attemptKey(0, kReplacingKey)).value_or(""), "") << "the lock is free again";
  EXPECT_FALSE(store.get(attemptKey(0, generationKey(1))).has_value()) << "nothing announced";
  // Only the generation that timed out: a later one is replaced as usual.
  store.set(attemptKey(1, generationFormedKey(0)), "1");
  store.set(attemptKey(1, generationFormedKey(1)), "1");
  store.set(attemptKey(1, generationTimedOutKey(0)), "2");
  store.add(attemptKey(1, kGenerationCounterKey), 1);
  EXPECT_EQ(claimReplacement(store, 1, "node-a_1 rank 2", 2).generation, 2);
}

/// The in-memory store, where the loop gives up on generation `wanted` during the first WAIT (a later failure
/// overtook it).
class OvertakingStore : public store::HashStore {
 public:
  explicit OvertakingStore(std::atomic<int>& wanted) : wanted_(wanted) {}
  bool wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    wanted_ = 0;
    return HashStore::wait(keys, timeout);
  }

 private:
  std::atomic<int>& wanted_;
};

TEST(ReplacementProtocol, TheWaitForFormedEndsWhenItsGenerationIsNoLongerWanted) {
  std::atomic<int> wanted{1};
  OvertakingStore store(wanted);
  store.set(attemptKey(0, generationFormedKey(0)), "1");
  ASSERT_EQ(claimReplacement(store, 0, "me", 1).generation, 1);
  EXPECT_FALSE(awaitFormed(store, 0, 1, "me", 10ms, wanted));
  EXPECT_EQ(store.get(attemptKey(0, kReplacingKey)), "me") << "not formed: the lock stays with its holder";
}

/// A store whose every call takes `delay`: a store host that is slow or far away.
class SlowStore : public store::HashStore {
 public:
  explicit SlowStore(std::chrono::milliseconds delay) : delay_(delay) {}
  std::string compareSet(const std::string& key, const std::string& expected, const std::string& desired) override {
    std::this_thread::sleep_for(delay_);
    return HashStore::compareSet(key, expected, desired);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    std::this_thread::sleep_for(delay_);
    return HashStore::add(key, delta);
  }

 private:
  std::chrono::milliseconds delay_;
};

TEST(StoreLane, AStoreThatAnswersSlowlyNeverStopsTheLoopFromTicking) {
  boost::asio::io_context io;
  StoreLane lane(io);
  lane.retarget([](const CancelFlag&) {
    auto store = std::make_unique<SlowStore>(500ms);
    store->set(attemptKey(0, generationFormedKey(0)), "1");  // the group formed
    return store;
  });
  // The loop's own work meanwhile: a 10 ms ticker, as the agent's monitor tick and signal handlers.
  int ticks = 0;
  boost::asio::steady_timer ticker(io);
  std::function<void()> tick = [&] {
    ticker.expires_after(10ms);
    ticker.async_wait([&](const boost::system::error_code& ec) {
      if (ec) return;
      ++ticks;
      tick();
    });
  };
  tick();
  ReplacementClaim claim;
  std::string error = "not done";
  int ticksAtDone = -1;
  lane.run([&](store::Store& store) { claim = claimReplacement(store, 0, "me", 1); },
           [&](const std::string& e) {
             error = e;
             ticksAtDone = ticks;
             ticker.cancel();
           });
  io.run_for(10s);
  EXPECT_EQ(error, "");
  EXPECT_EQ(claim.generation, 1);
  // Three slow calls (1.5 s): a loop blocked by them would have ticked about once.
  EXPECT_GE(ticksAtDone, 30) << "the loop kept ticking while the store answered slowly";
  EXPECT_EQ(lane.pending(), 0u);
}

TEST(StoreLane, AStoreThatCannotBeReachedEndsTheCallWithItsErrorAndTheNextCallConnectsAgain) {
  boost::asio::io_context io;
  StoreLane lane(io);
  int connects = 0;
  lane.retarget([&connects](const CancelFlag&) -> std::unique_ptr<store::Store> {
    if (++connects == 1) throw std::runtime_error("connection refused");
    return std::make_unique<store::HashStore>();
  });
  std::vector<std::string> errors;
  lane.run([](store::Store& store) { store.set("k", "v"); }, [&](const std::string& e) { errors.push_back(e); });
  lane.run([](store::Store& store) { store.set("k", "v"); }, [&](const std::string& e) { errors.push_back(e); });
  auto work = boost::asio::make_work_guard(io);  // the answers come from the lane's thread
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (errors.size() < 2 && std::chrono::steady_clock::now() < deadline) io.run_one_for(1s);
  EXPECT_EQ(errors, (std::vector<std::string>{"connection refused", ""}));
}

TEST(StoreLane, GoingAwayEndsAStoreWaitInProgressAtOnce) {
  // A real store served on a thread of its own, and the real TCP client the agent uses.
  boost::asio::io_context storeIo;
  store::StoreServer server(storeIo, {"127.0.0.1", 0, {}, {}});
  std::thread serving([&] { storeIo.run(); });
  boost::asio::io_context io;
  auto lane = std::make_unique<StoreLane>(io);
  lane->retarget([port = server.port()](const CancelFlag& cancel) {
    return std::make_unique<store::StoreClient>("127.0.0.1", port, 60s, 5s, &cancel);
  });
  lane->run([](store::Store& store) { store.wait({"never"}, 60s); });
  ASSERT_TRUE(test::waitUntil([&] { return server.waiterCount() == 1; }, 10s)) << "the WAIT reached the store";
  const auto start = std::chrono::steady_clock::now();
  lane.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s) << "the minute-long WAIT ended with the lane";
  boost::asio::post(storeIo, [&] { server.stop(); });
  serving.join();
}

}  // namespace
}  // namespace ddprun::launcher
