// ddprun's store operations on a real etcd (started by the test on loopback), as the ticket rendezvous uses
// them: reads and writes, COMPARE_SET and ADD from competing clients, WAIT through watches, how failures surface
// (refused, silent, killed etcd), and a round of concurrent nodes. Protocol: etcd docs
// dev-guide/api_grpc_gateway; see rendezvous/etcd_client.hpp and rendezvous/etcd_store.hpp.
#include <gtest/gtest.h>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <future>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "rendezvous/etcd_node_lease.hpp"
#include "rendezvous/etcd_store.hpp"
#include "rendezvous/ticket_rendezvous.hpp"
#include "store/store_errors.hpp"
#include "support/etcd_fixture.hpp"
#include "support/wait_until.hpp"

namespace ddprun::rendezvous {
namespace {
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using test::EtcdServer;

constexpr auto kReadTimeout = 2000ms;

std::chrono::milliseconds since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
}

/// One etcd shared by the suite; every test uses keys under its own name.
class EtcdStoreTest : public ::testing::Test {
 protected:
  static void TearDownTestSuite() { etcd_.reset(); }

  void SetUp() override {
    const std::string reason = EtcdServer::unavailableReason();
    if (!reason.empty()) GTEST_SKIP() << reason;
    if (!etcd_) etcd_ = std::make_unique<EtcdServer>();
    prefix_ = std::string("/") + ::testing::UnitTest::GetInstance()->current_test_info()->name() + "/";
  }

  std::unique_ptr<EtcdStore> store() const {
    return std::make_unique<EtcdStore>("127.0.0.1", etcd_->port(), kReadTimeout);
  }
  std::string key(const std::string& name) const { return prefix_ + name; }

  static std::unique_ptr<EtcdServer> etcd_;
  std::string prefix_;
};
std::unique_ptr<EtcdServer> EtcdStoreTest::etcd_;

TEST_F(EtcdStoreTest, SetsGetsAndKeepsBinaryValuesIntact) {
  auto s = store();
  EXPECT_EQ(s->describe(), "etcd-v3 at 127.0.0.1:" + std::to_string(etcd_->port()));
  EXPECT_FALSE(s->get(key("absent")));
  const std::string binary("a\0b\xff\n", 5);
  s->set(key("k"), binary);
  EXPECT_EQ(s->get(key("k")), binary);
  EXPECT_EQ(s->multiGet({key("k"), key("absent")}), (std::vector<std::string>{binary, ""}));
}

TEST_F(EtcdStoreTest, CompareSetHasOneWinnerAmongCreatorsAndFollowsTcpStoresAnswers) {
  std::vector<std::future<std::string>> creators;
  for (int i = 0; i < 8; ++i) {
    creators.push_back(std::async(
        std::launch::async, [&, i] { return store()->compareSet(key("size"), "", "winner " + std::to_string(i)); }));
  }
  std::set<std::string> answers;
  for (auto& c : creators) answers.insert(c.get());
  ASSERT_EQ(answers.size(), 1u) << "every creator must learn the one winner's value";
  auto s = store();
  EXPECT_EQ(s->get(key("size")), *answers.begin());
  EXPECT_EQ(s->compareSet(key("size"), *answers.begin(), "next"), "next");
  EXPECT_EQ(s->compareSet(key("size"), "stale", "other"), "next");
  EXPECT_EQ(s->compareSet(key("missing"), "x", "y"), "x");  // TCPStore's answer for a missing key
}

TEST_F(EtcdStoreTest, ConcurrentAddsGiveEveryCallerADistinctTicket) {
  constexpr int kClients = 16, kAdds = 8;
  std::vector<std::future<std::vector<int64_t>>> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.push_back(std::async(std::launch::async, [&] {
      auto s = store();
      std::vector<int64_t> got;
      for (int i = 0; i < kAdds; ++i) got.push_back(s->add(key("tickets"), 1));
      return got;
    }));
  }
  std::set<int64_t> tickets;
  for (auto& c : clients) {
    for (auto t : c.get()) tickets.insert(t);
  }
  EXPECT_EQ(tickets.size(), static_cast<size_t>(kClients * kAdds));
  EXPECT_EQ(*tickets.begin(), 1);
  EXPECT_EQ(*tickets.rbegin(), kClients * kAdds);
  EXPECT_EQ(store()->add(key("tickets"), 0), kClients * kAdds);
  store()->set(key("text"), "abc");
  EXPECT_THROW(store()->add(key("text"), 1), store::StoreError);
}

TEST_F(EtcdStoreTest, AWaitWakesOnAnotherClientsWriteAndTimesOutOtherwise) {
  auto waiter = store();
  auto start = Clock::now();
  EXPECT_FALSE(waiter->wait({key("never")}, 300ms));
  EXPECT_GE(since(start), 290ms);
  auto woken = std::async(std::launch::async, [&] { return waiter->wait({key("a"), key("b")}, 20s); });
  auto writer = store();
  writer->set(key("a"), "1");
  EXPECT_EQ(woken.wait_for(200ms), std::future_status::timeout) << "one of two keys is not all of them";
  start = Clock::now();
  writer->set(key("b"), "1");
  EXPECT_TRUE(woken.get());
  EXPECT_LT(since(start), 2000ms);
  EXPECT_TRUE(waiter->wait({key("a")}, 0ms));  // present: at once
}

TEST_F(EtcdStoreTest, SixteenNodesJoinOneTicketRoundOnEtcd) {
  constexpr int kNodes = 16;
  CancelFlag cancel{false};
  std::vector<std::future<RoundAssignment>> joins;
  for (int i = 0; i < kNodes; ++i) {
    joins.push_back(std::async(std::launch::async, [&, i] {
      DynamicRendezvousSettings settings;
      settings.runId = prefix_;
      settings.limits = RoundLimits{kNodes, kNodes, 30000};
      settings.joinTimeout = 60s;
      settings.liveness = LivenessSettings{1s, 3};
      TicketRendezvous node(store(), settings);
      const std::string id = "n" + std::to_string(100 + i);
      return node.next(NodeDescriptor{id, "addr", 1 + i % 2, "store-" + id, 1000}, cancel);
    }));
  }
  std::map<int, int> offsetByRank;
  for (auto& join : joins) {
    const auto a = join.get();
    EXPECT_EQ(a.groupWorldSize, kNodes);
    EXPECT_EQ(a.masterAddr, "store-n100");
    offsetByRank[a.groupRank] = a.rankOffset;
  }
  ASSERT_EQ(offsetByRank.size(), static_cast<size_t>(kNodes));
  int expected = 0;
  for (int rank = 0; rank < kNodes; ++rank) {
    EXPECT_EQ(offsetByRank[rank], expected);
    expected += 1 + rank % 2;
  }
}

/// Waits (up to `timeout`) until `key` is absent from etcd; returns whether it went.
bool waitUntilAbsent(EtcdStore& s, const std::string& key, std::chrono::milliseconds timeout) {
  return test::waitUntil([&] { return !s.get(key); }, timeout);
}

TEST_F(EtcdStoreTest, ANodeLeaseOutlivesItsTtlWhileItsProcessLivesAndLapsesWhenItIsKilled) {
  // The killed holder is a real process: nothing of it renews or revokes anything after SIGKILL.
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(ready[0]);
    EtcdNodeLease lease("127.0.0.1", etcd_->port(), kReadTimeout);
    lease.hold(key("killed"));
    (void)!::write(ready[1], "r", 1);
    while (true) ::pause();
  }
  ::close(ready[1]);
  pollfd fd{ready[0], POLLIN, 0};
  ASSERT_EQ(::poll(&fd, 1, 20000), 1) << "the child never held its lease";
  ::close(ready[0]);
  auto s = store();
  auto kept = std::make_unique<EtcdNodeLease>("127.0.0.1", etcd_->port(), kReadTimeout);
  kept->hold(key("kept"));
  ASSERT_TRUE(s->get(key("killed")));
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  const auto killedAt = Clock::now();
  // Gone after the TTL (3 s; etcd looks for expired leases every 0.5 s), far sooner than torchrun's 15 s of
  // heartbeats; the bound leaves room for a busy machine.
  EXPECT_TRUE(waitUntilAbsent(*s, key("killed"), 10s));
  // The living holder's key stayed through at least twice the TTL: its renewals work. A deliberate wait, kept: time
  // passing past the TTL is the behaviour under test, not a guess about readiness.
  std::this_thread::sleep_until(killedAt + 2 * EtcdNodeLease::kTtl);
  EXPECT_TRUE(s->get(key("kept")));
  kept->hold(key("moved"));  // a node id that changed moves the key
  EXPECT_FALSE(s->get(key("kept")));
  EXPECT_TRUE(s->get(key("moved")));
  kept.reset();  // a node that ends revokes its lease: the key goes at once
  EXPECT_FALSE(s->get(key("moved")));
}

TEST_F(EtcdStoreTest, ANodeWhoseLeaseEndsIsSeenByItsWatcherAtItsNextCheck) {
  CancelFlag cancel{false};
  const auto node = [&] {
    DynamicRendezvousSettings settings;
    settings.runId = prefix_;
    settings.limits = RoundLimits{2, 2, 30000};
    settings.joinTimeout = 60s;
    settings.liveness = LivenessSettings{5s, 3};  // heartbeats alone would take 15 s
    return std::make_unique<TicketRendezvous>(
        store(), settings, std::make_shared<EtcdNodeLease>("127.0.0.1", etcd_->port(), kReadTimeout));
  };
  auto a = node();
  auto b = node();
  auto joinA = std::async(std::launch::async, [&] { return a->next(NodeDescriptor{"a", "addr", 1, "a", 1}, cancel); });
  b->next(NodeDescriptor{"b", "addr", 1, "b", 1}, cancel);
  joinA.get();
  EXPECT_EQ(a->check(), Membership::kStable);
  const auto start = Clock::now();
  b.reset();  // its lease is revoked, as when it lapses after a kill
  Membership seen = Membership::kStable;
  EXPECT_TRUE(test::waitUntil(
      [&] {
        seen = a->check();
        return seen != Membership::kStable;
      },
      30s));
  EXPECT_EQ(seen, Membership::kNodeLost);
  EXPECT_LT(since(start), 5s) << "seen by the lease, not by the heartbeat timeout";
  EXPECT_TRUE(store()
                  ->get(round_keys::prefix(prefix_) + "/" + round_keys::ended(0))
                  .value_or("")
                  .find("node b's lease lapsed") != std::string::npos);
}

TEST(EtcdStoreErrors, NothingListeningThrowsNamingTheEndpointWithinTheTimeout) {
  const int port = test::freePort();
  EtcdStore s("127.0.0.1", static_cast<uint16_t>(port), 1000ms);
  const auto start = Clock::now();
  try {
    s.get("/k");
    FAIL() << "no error without a server";
  } catch (const store::StoreConnectionError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("etcd-v3 at 127.0.0.1:" + std::to_string(port)), std::string::npos) << message;
    EXPECT_NE(message.find("range get"), std::string::npos) << message;
    EXPECT_NE(message.find("refused"), std::string::npos) << message;
  }
  EXPECT_LT(since(start), 1500ms);
  EXPECT_THROW(s.add("/n", 1), store::StoreConnectionError);
  EXPECT_THROW(s.wait({"/k"}, 10s), store::StoreConnectionError);
}

TEST(EtcdStoreErrors, ASilentServerThrowsAfterTheReadTimeout) {
  // A listening socket that never accepts: the kernel completes the handshake, nobody ever answers.
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor silent(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  const auto port = silent.local_endpoint().port();
  EtcdStore s("127.0.0.1", port, 700ms);
  const auto start = Clock::now();
  try {
    s.compareSet("/k", "", "x");
    FAIL() << "no error from a silent server";
  } catch (const store::StoreConnectionError& e) {
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

TEST_F(EtcdKilledTest, TheNextCallThrowsAClearErrorInsteadOfHangingAndReconnectsOnceEtcdIsBack) {
  EtcdStore s("127.0.0.1", etcd_->port(), kReadTimeout);
  s.set("/k", "v1");
  etcd_->restart();  // the kept-alive connection is dead now; the data survived
  EXPECT_EQ(s.get("/k"), "v1");
  etcd_->kill();
  const auto start = Clock::now();
  try {
    s.get("/k");  // on the kept-alive connection, now dead
    FAIL() << "no error after etcd was killed";
  } catch (const store::StoreConnectionError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("etcd-v3 at 127.0.0.1:" + std::to_string(etcd_->port()) + ": range get"), std::string::npos)
        << message;
    EXPECT_NE(message.find("refused"), std::string::npos) << message;
  }
  EXPECT_THROW(s.add("/n", 1), store::StoreConnectionError);
  EXPECT_LT(since(start), 2000ms);
}

TEST_F(EtcdKilledTest, AWaitInProgressEndsWithAnErrorWhenEtcdDies) {
  EtcdStore s("127.0.0.1", etcd_->port(), kReadTimeout);
  std::promise<void> watching;
  auto waiter = std::async(std::launch::async, [&] {
    const auto start = Clock::now();
    try {
      s.wait({"/never"}, 20s);
      ADD_FAILURE() << "the wait returned normally although etcd died";
    } catch (const store::StoreConnectionError& e) {
      EXPECT_NE(std::string(e.what()).find("watch of /never failed"), std::string::npos) << e.what();
    }
    return since(start);
  });
  // Its watch is open once etcd reports a watcher on the key; killing then ends it.
  ASSERT_TRUE(etcd_->waitForWatchers(1, 10s));
  etcd_->kill();
  EXPECT_LT(waiter.get(), 10000ms);
}

}  // namespace
}  // namespace ddprun::rendezvous
