// The etcd-v3 rendezvous backend against a real etcd (started by the test on loopback): compare-and-set
// from competing backends, watches, lease-based liveness, and how failures surface (refused, silent,
// killed etcd). Protocol: etcd docs dev-guide/api_grpc_gateway; see rendezvous/etcd_client.hpp.
#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <condition_variable>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

#include "rendezvous/etcd_backend.hpp"
#include "support/etcd_fixture.hpp"

namespace ddprun::rendezvous {
namespace {
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using test::EtcdServer;

constexpr auto kReadTimeout = 2000ms;
const LivenessSettings kLiveness{300ms, 2};

std::chrono::milliseconds since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
}

/// Every test gets its own run id on one etcd shared by the suite (ctest runs each test in its own
/// process, so there it is one etcd per test anyway).
class EtcdBackendTest : public ::testing::Test {
 protected:
  static void TearDownTestSuite() { etcd_.reset(); }

  void SetUp() override {
    const std::string reason = EtcdServer::unavailableReason();
    if (!reason.empty()) GTEST_SKIP() << reason;
    if (!etcd_) etcd_ = std::make_unique<EtcdServer>();
    runId_ = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }

  std::unique_ptr<EtcdRendezvousBackend> backend(LivenessSettings liveness = kLiveness) const {
    return std::make_unique<EtcdRendezvousBackend>("127.0.0.1", etcd_->port(), runId_, liveness, kReadTimeout);
  }

  static std::unique_ptr<EtcdServer> etcd_;
  std::string runId_;
};
std::unique_ptr<EtcdServer> EtcdBackendTest::etcd_;

TEST_F(EtcdBackendTest, DescribesItselfByEndpoint) {
  EXPECT_EQ(backend()->describe(), "etcd-v3 at 127.0.0.1:" + std::to_string(etcd_->port()));
}

TEST_F(EtcdBackendTest, CreatesTheAbsentState) {
  auto b = backend();
  const auto initial = b->getState();
  EXPECT_FALSE(initial.value.has_value());
  EXPECT_EQ(initial.token, "");

  const auto [stored, written] = b->setState("round 0", initial.token);
  EXPECT_TRUE(written);
  EXPECT_EQ(stored.value, "round 0");
  EXPECT_NE(stored.token, "");

  const auto reread = b->getState();
  EXPECT_EQ(reread.value, "round 0");
  EXPECT_EQ(reread.token, stored.token);
}

TEST_F(EtcdBackendTest, KeepsBinaryValuesIntact) {
  auto b = backend();
  const std::string binary("\x00\xff\x01\n\x80{\"}", 9);
  ASSERT_TRUE(b->setState(binary, "").second);
  EXPECT_EQ(b->getState().value, binary);
}

TEST_F(EtcdBackendTest, OnlyOneOfTwoCreatorsWins) {
  auto a = backend();
  auto b = backend();
  ASSERT_EQ(a->getState().token, "");
  ASSERT_EQ(b->getState().token, "");

  const auto [aState, aWritten] = a->setState("from a", "");
  const auto [bState, bWritten] = b->setState("from b", "");
  EXPECT_TRUE(aWritten);
  EXPECT_FALSE(bWritten);
  EXPECT_EQ(bState.value, "from a");  // the loser learns the winner's state
  EXPECT_EQ(bState.token, aState.token);
  EXPECT_EQ(b->getState().value, "from a");
}

TEST_F(EtcdBackendTest, ConcurrentSwapsFromOneTokenHaveExactlyOneWinner) {
  auto setup = backend();
  const std::string token = setup->setState("base", "").first.token;
  constexpr int kWriters = 6;
  std::mutex mutex;
  std::condition_variable allConnected;
  int connected = 0;
  std::vector<std::future<std::pair<RendezvousBackend::State, bool>>> results;
  for (int i = 0; i < kWriters; ++i) {
    results.push_back(std::async(std::launch::async, [&, i] {
      auto mine = backend();
      mine->getState();  // connected before the race starts, so the swaps really overlap
      {
        std::unique_lock lock(mutex);
        if (++connected == kWriters) allConnected.notify_all();
        allConnected.wait(lock, [&] { return connected == kWriters; });
      }
      return mine->setState("writer " + std::to_string(i), token);
    }));
  }
  int winners = 0;
  std::string winnerValue;
  std::vector<RendezvousBackend::State> loserViews;
  for (auto& result : results) {
    auto [state, written] = result.get();
    if (written) {
      ++winners;
      winnerValue = *state.value;
    } else {
      loserViews.push_back(state);
    }
  }
  EXPECT_EQ(winners, 1);
  const auto final = setup->getState();
  EXPECT_EQ(final.value, winnerValue);
  for (const auto& view : loserViews) {
    EXPECT_EQ(view.value, final.value);
    EXPECT_EQ(view.token, final.token);
  }
}

TEST_F(EtcdBackendTest, StaleTokenReturnsTheWinnersState) {
  auto a = backend();
  auto b = backend();
  const auto first = a->setState("v1", "").first;
  const auto second = b->setState("v2", first.token);
  ASSERT_TRUE(second.second);

  const auto [seen, written] = a->setState("v3", first.token);
  EXPECT_FALSE(written);
  EXPECT_EQ(seen.value, "v2");
  EXPECT_EQ(seen.token, second.first.token);
  EXPECT_EQ(a->getState().value, "v2");
}

TEST_F(EtcdBackendTest, RejectsATokenItNeverIssued) {
  EXPECT_THROW(backend()->setState("x", "not-a-revision"), RendezvousBackendError);
}

TEST_F(EtcdBackendTest, RunIdsDoNotShareState) {
  auto a = backend();
  EtcdRendezvousBackend other("127.0.0.1", etcd_->port(), runId_ + "-other", kLiveness, kReadTimeout);
  ASSERT_TRUE(a->setState("mine", "").second);
  EXPECT_FALSE(other.getState().value.has_value());
}

TEST_F(EtcdBackendTest, WaitForChangeWakesPromptlyOnAnotherClientsWrite) {
  auto waiter = backend();
  auto writer = backend();
  const auto token = waiter->setState("v1", "").first.token;

  // The write comes a little later; the waiter must return after it began (not at once), and soon after.
  Clock::time_point writing;
  auto write = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(300ms);
    writing = Clock::now();
    return writer->setState("v2", token).second;
  });
  waiter->waitForChange(token, 10s);
  const auto woke = Clock::now();
  EXPECT_TRUE(write.get());  // `writing` is set and visible from here on
  EXPECT_GE(woke, writing) << "returned before the write";
  EXPECT_LT(woke - writing, 2000ms) << "the watch did not wake on the write";
  EXPECT_EQ(waiter->getState().value, "v2");
}

TEST_F(EtcdBackendTest, WaitForChangeOnAbsentStateWakesOnCreation) {
  auto waiter = backend();
  auto writer = backend();
  ASSERT_EQ(waiter->getState().token, "");

  Clock::time_point writing;
  auto write = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(300ms);
    writing = Clock::now();
    return writer->setState("created", "").second;
  });
  waiter->waitForChange("", 10s);
  const auto woke = Clock::now();
  EXPECT_TRUE(write.get());
  EXPECT_GE(woke, writing) << "returned before the creation";
  EXPECT_LT(woke - writing, 2000ms);
}

TEST_F(EtcdBackendTest, WaitForChangeReturnsAtOnceWhenTheTokenIsAlreadyStale) {
  auto a = backend();
  const auto old = a->setState("v1", "").first.token;
  ASSERT_TRUE(a->setState("v2", old).second);
  const auto start = Clock::now();
  a->waitForChange(old, 10s);
  EXPECT_LT(since(start), 1000ms);
}

TEST_F(EtcdBackendTest, WaitForChangeTimesOutWhenNothingChanges) {
  auto a = backend();
  const auto token = a->setState("v1", "").first.token;
  const auto start = Clock::now();
  a->waitForChange(token, 800ms);
  const auto waited = since(start);
  EXPECT_GE(waited, 750ms);
  EXPECT_LT(waited, 1800ms);

  const auto startAbsent = Clock::now();
  EtcdRendezvousBackend empty("127.0.0.1", etcd_->port(), runId_ + "-empty", kLiveness, kReadTimeout);
  empty.waitForChange("", 800ms);
  EXPECT_GE(since(startAbsent), 750ms);
  EXPECT_LT(since(startAbsent), 1800ms);
}

TEST_F(EtcdBackendTest, AWriteToAnotherKeyDoesNotWakeTheWatch) {
  auto a = backend();
  auto b = backend();
  const auto token = a->setState("v1", "").first.token;
  b->keepAlive("some-node");  // a write under the same run, outside the state key
  const auto start = Clock::now();
  a->waitForChange(token, 600ms);
  EXPECT_GE(since(start), 550ms);
}

/// Polls deadNodes until `node` is reported dead or `limit` passes; returns how long it took.
std::optional<std::chrono::milliseconds> timeUntilDead(RendezvousBackend& backend, const std::string& node,
                                                       std::chrono::milliseconds limit,
                                                       const std::function<void()>& duringWait = {}) {
  const auto start = Clock::now();
  while (since(start) < limit) {
    if (duringWait) duringWait();
    if (backend.deadNodes({node}) == std::vector<std::string>{node}) return since(start);
    std::this_thread::sleep_for(kLiveness.interval);
  }
  return std::nullopt;
}

TEST_F(EtcdBackendTest, NodesThatNeverAnnouncedAreDead) {
  auto b = backend();
  b->keepAlive("alive");
  EXPECT_EQ(b->deadNodes({"alive", "ghost-1", "ghost-2"}), (std::vector<std::string>{"ghost-1", "ghost-2"}));
  EXPECT_TRUE(b->deadNodes({}).empty());
}

TEST_F(EtcdBackendTest, AKeptAliveNodeStaysAliveAndASilentOneDies) {
  auto keeper = backend();
  auto silent = backend();
  auto observer = backend();
  keeper->keepAlive("keeper");
  silent->keepAlive("silent");
  EXPECT_TRUE(observer->deadNodes({"keeper", "silent"}).empty());

  // etcd rounds the 1 s lease (ceil of 600 ms) up to its minimum TTL (2 s by default) and checks expiry
  // every 500 ms, so "dead" arrives a few seconds after the last sign of life, never before the expiry.
  const auto waited = timeUntilDead(*observer, "silent", 10s, [&] {
    keeper->keepAlive("keeper");
    EXPECT_TRUE(observer->deadNodes({"keeper"}).empty()) << "a node that keeps alive was declared dead";
  });
  ASSERT_TRUE(waited.has_value()) << "the silent node was not declared dead within 10 s";
  EXPECT_GE(*waited, kLiveness.expiry());
  EXPECT_EQ(observer->deadNodes({"keeper", "silent"}), std::vector<std::string>{"silent"});
}

TEST_F(EtcdBackendTest, ARetiredNodeIsDeadAtOnce) {
  auto node = backend();
  auto observer = backend();
  node->keepAlive("leaving");
  ASSERT_TRUE(observer->deadNodes({"leaving"}).empty());
  node->retire("leaving");
  EXPECT_EQ(observer->deadNodes({"leaving"}), std::vector<std::string>{"leaving"});
  node->retire("leaving");  // twice, or for a node never seen: no throw
  node->retire("never-seen");
}

TEST_F(EtcdBackendTest, ANodeWhoseLeaseExpiredComesBackOnItsNextKeepAlive) {
  auto node = backend();
  auto observer = backend();
  node->keepAlive("stalled");
  ASSERT_TRUE(timeUntilDead(*observer, "stalled", 10s).has_value());
  node->keepAlive("stalled");  // the old lease is gone: a new one is granted and the key written again
  EXPECT_TRUE(observer->deadNodes({"stalled"}).empty());
}

TEST(EtcdBackendErrors, NothingListeningThrowsNamingTheEndpointWithinTheTimeout) {
  const int port = test::freePort();
  EtcdRendezvousBackend b("127.0.0.1", static_cast<uint16_t>(port), "run", kLiveness, 1000ms);
  const auto start = Clock::now();
  try {
    b.getState();
    FAIL() << "no error without a server";
  } catch (const RendezvousBackendError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("etcd-v3 at 127.0.0.1:" + std::to_string(port)), std::string::npos) << message;
    EXPECT_NE(message.find("range get"), std::string::npos) << message;
    EXPECT_NE(message.find("refused"), std::string::npos) << message;
  }
  EXPECT_LT(since(start), 1500ms);
  EXPECT_THROW(b.keepAlive("n"), RendezvousBackendError);
  EXPECT_THROW(b.waitForChange("5", 10s), RendezvousBackendError);
  b.retire("n");  // never throws
}

TEST(EtcdBackendErrors, ASilentServerThrowsAfterTheReadTimeout) {
  // A listening socket that never accepts: the kernel completes the handshake, nobody ever answers.
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor silent(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  const auto port = silent.local_endpoint().port();
  EtcdRendezvousBackend b("127.0.0.1", port, "run", kLiveness, 700ms);
  const auto start = Clock::now();
  try {
    b.setState("x", "");
    FAIL() << "no error from a silent server";
  } catch (const RendezvousBackendError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("etcd-v3 at 127.0.0.1:" + std::to_string(port)), std::string::npos) << message;
    EXPECT_NE(message.find("compare-and-swap"), std::string::npos) << message;
    EXPECT_NE(message.find("no answer within 700 ms"), std::string::npos) << message;
  }
  EXPECT_GE(since(start), 650ms);
  EXPECT_LT(since(start), 1500ms);
}

class EtcdKilledTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string reason = EtcdServer::unavailableReason();
    if (!reason.empty()) GTEST_SKIP() << reason;
    etcd_ = std::make_unique<EtcdServer>();  // its own: this test kills it
  }
  std::unique_ptr<EtcdServer> etcd_;
};

TEST_F(EtcdKilledTest, TheNextCallThrowsAClearErrorInsteadOfHanging) {
  EtcdRendezvousBackend b("127.0.0.1", etcd_->port(), "run", kLiveness, kReadTimeout);
  const auto token = b.setState("v1", "").first.token;
  b.keepAlive("n");
  etcd_->kill();

  const auto start = Clock::now();
  try {
    b.getState();  // on the kept-alive connection, now dead
    FAIL() << "no error after etcd was killed";
  } catch (const RendezvousBackendError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("etcd-v3 at 127.0.0.1:" + std::to_string(etcd_->port()) + ": range get"), std::string::npos)
        << message;
    EXPECT_NE(message.find("refused"), std::string::npos) << message;
  }
  EXPECT_THROW(b.setState("v2", token), RendezvousBackendError);
  EXPECT_THROW(b.keepAlive("n"), RendezvousBackendError);
  EXPECT_THROW(b.deadNodes({"n"}), RendezvousBackendError);
  b.retire("n");
  EXPECT_LT(since(start), 2000ms);
}

TEST_F(EtcdKilledTest, ReconnectsOnceEtcdIsBack) {
  EtcdRendezvousBackend b("127.0.0.1", etcd_->port(), "run", kLiveness, kReadTimeout);
  const auto token = b.setState("v1", "").first.token;
  etcd_->restart();  // the kept-alive connection is dead now; the data survived
  const auto state = b.getState();
  EXPECT_EQ(state.value, "v1");
  EXPECT_EQ(state.token, token);
  EXPECT_TRUE(b.setState("v2", token).second);
}

TEST_F(EtcdKilledTest, AWaitInProgressEndsWithAnErrorWhenEtcdDies) {
  EtcdRendezvousBackend b("127.0.0.1", etcd_->port(), "run", kLiveness, kReadTimeout);
  const auto token = b.setState("v1", "").first.token;
  auto killer = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(500ms);
    etcd_->kill();
  });
  const auto start = Clock::now();
  try {
    b.waitForChange(token, 20s);
    ADD_FAILURE() << "the wait returned normally although etcd died";
  } catch (const RendezvousBackendError& e) {
    EXPECT_NE(std::string(e.what()).find("watch of /ddprun/rdzv/run/state failed"), std::string::npos) << e.what();
  }
  killer.get();
  EXPECT_LT(since(start), 5000ms);
}

}  // namespace
}  // namespace ddprun::rendezvous
