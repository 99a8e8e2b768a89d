// The Store interface: the TCP client against the real server, the in-memory HashStore, a PrefixStore and
// the etcd store answer every operation alike (HashStore is the test double for everything above the socket, so it
// must not drift from the real thing); the served store on the server's own loop; and the client's own errors.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <fstream>
#include <future>
#include <thread>

#include "rendezvous/etcd_store.hpp"
#include "store/hash_store.hpp"
#include "store/prefix_store.hpp"
#include "store/served_store.hpp"
#include "store/store_client.hpp"
#include "store/store_errors.hpp"
#include "support/child_process.hpp"
#include "support/etcd_fixture.hpp"
#include "support/fake_clock.hpp"
#include "support/store_fixture.hpp"
#include "support/wait_until.hpp"

namespace ddprun::store {
namespace {
using namespace std::chrono_literals;

/// One way to get a Store, and a second handle on the same keys (another client).
struct Backing {
  virtual ~Backing() = default;
  virtual std::shared_ptr<Store> open() = 0;
};

struct TcpBacking : Backing {
  test::RunningStore server;
  std::shared_ptr<Store> open() override { return std::make_shared<StoreClient>("127.0.0.1", server.port(), 5s, 5s); }
};
struct HashBacking : Backing {
  std::shared_ptr<HashStore> shared = std::make_shared<HashStore>();
  std::shared_ptr<Store> open() override { return shared; }
};
struct PrefixBacking : Backing {
  std::shared_ptr<HashStore> shared = std::make_shared<HashStore>();
  std::shared_ptr<Store> open() override { return std::make_shared<PrefixStore>("/job", shared); }
};

struct EtcdBacking : Backing {
  test::EtcdServer etcd;
  std::shared_ptr<Store> open() override {
    return std::make_shared<rendezvous::EtcdStore>("127.0.0.1", etcd.port(), 5s);
  }
};

class StoreContract : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "tcp") backing_ = std::make_unique<TcpBacking>();
    if (GetParam() == "hash") backing_ = std::make_unique<HashBacking>();
    if (GetParam() == "prefix") backing_ = std::make_unique<PrefixBacking>();
    if (GetParam() == "etcd") {
      const std::string reason = test::EtcdServer::unavailableReason();
      if (!reason.empty()) GTEST_SKIP() << reason;
      backing_ = std::make_unique<EtcdBacking>();
    }
  }
  std::unique_ptr<Backing> backing_;
};

TEST_P(StoreContract, EveryOperationAnswersAsTcpStoreDoes) {
  auto store = backing_->open();
  EXPECT_FALSE(store->get("k").has_value());
  store->set("k", "v");
  EXPECT_EQ(store->get("k"), "v");
  EXPECT_EQ(store->compareSet("k", "v", "w"), "w");           // matches: swapped
  EXPECT_EQ(store->compareSet("k", "nope", "x"), "w");        // no match: current value
  EXPECT_EQ(store->compareSet("new", "", "first"), "first");  // missing, expected empty: created
  EXPECT_EQ(store->compareSet("absent", "e", "d"), "e");      // missing, expected not empty: TCPStore's quirk
  EXPECT_FALSE(store->get("absent").has_value());
  EXPECT_EQ(store->add("n", 5), 5);
  EXPECT_EQ(store->add("n", -7), -2);
  EXPECT_EQ(store->get("n"), "-2");
  EXPECT_EQ(store->multiGet({"k", "missing", "n"}), (std::vector<std::string>{"w", "", "-2"}));
  EXPECT_TRUE(store->wait({"k", "n"}, 10ms));
  EXPECT_FALSE(store->wait({"k", "never"}, 50ms));
}

TEST_P(StoreContract, EraseDeletesOneKeyAndAMissingKeyIsNoError) {
  auto store = backing_->open();
  auto other = backing_->open();
  store->set("gone", "v");
  store->set("kept", "w");
  store->add("count", 3);
  store->erase("gone");
  store->erase("count");
  EXPECT_FALSE(other->get("gone").has_value());
  EXPECT_EQ(other->get("kept"), "w");
  EXPECT_EQ(other->add("count", 1), 1) << "an erased counter starts again from 0";
  store->erase("gone");   // gone already
  store->erase("never");  // never there
  EXPECT_EQ(store->multiGet({"gone", "kept"}), (std::vector<std::string>{"", "w"})) << "the store is still in step";
}

TEST_P(StoreContract, AWaitIsWokenByAnotherClient) {
  auto waiter = backing_->open();
  auto setter = backing_->open();
  auto woken = std::async(std::launch::async, [&] { return waiter->wait({"late"}, 30s); });
  setter->set("late", "1");
  EXPECT_TRUE(woken.get());
}

INSTANTIATE_TEST_SUITE_P(Store, StoreContract, ::testing::Values("tcp", "hash", "prefix", "etcd"));

TEST(StoreServer, TheAgentSetsAndClearsRootKeysButNotTheWorkersOrTheRendezvous) {
  // Keys as they travel: torch's TCPStore client sends "/" + key, so the flight recorder's dump request at the root
  // of the store is "/exception_dump" and a worker's key under the agent store's PrefixStore("/worker/attempt_0") is
  // "//worker/attempt_0/..."; TCPStore's own worker count is "init/". Before the next attempt ddprun deletes the dump
  // request and raw keys, never the workers' keys, the rendezvous' (ddprun's own client, no "/" added) or a user's.
  test::RunningStore server;
  StoreClient client("127.0.0.1", server.port(), 5s, 5s);
  client.set("//worker/attempt_0/default_pg/0", "x");
  client.set("/ddprun.rdzv.job/state", "y");
  client.add("init/", 1);
  client.set("/my_job_state", "kept");  // a user's own key through a plain TCPStore client
  server.onLoop([](store::StoreServer& s) {
    s.set("/exception_dump", std::string("\x01\x00\x00\x00", 4));
    return 0;
  });
  EXPECT_EQ(client.get("/exception_dump"), std::string("\x01\x00\x00\x00", 4));
  EXPECT_EQ(server.onLoop([](store::StoreServer& s) { return s.deleteRootKeys({"/exception_dump"}); }), 2u);
  EXPECT_EQ(client.multiGet({"//worker/attempt_0/default_pg/0", "/ddprun.rdzv.job/state", "/my_job_state"}),
            (std::vector<std::string>{"x", "y", "kept"}));
  EXPECT_EQ(server.onLoop([](store::StoreServer& s) { return s.keyCount(); }), 3);
}

TEST(StoreClient, MultiSetWritesEveryEntryInOneRequestAndWakesTheirWaiters) {
  test::RunningStore server;
  StoreClient writer("127.0.0.1", server.port(), 5s, 5s), waiter("127.0.0.1", server.port(), 5s, 5s);
  auto woken = std::async(std::launch::async, [&] { return waiter.wait({"a/700"}, 10s); });
  std::vector<std::pair<std::string, std::string>> entries;
  for (int i = 0; i < 1024; ++i) entries.emplace_back("a/" + std::to_string(i), "v" + std::to_string(i));
  writer.multiSet(entries);
  EXPECT_TRUE(woken.get());
  EXPECT_EQ(writer.multiGet({"a/0", "a/1023"}), (std::vector<std::string>{"v0", "v1023"}));
  EXPECT_EQ(server.onLoop([](store::StoreServer& s) { return s.keyCount(); }), 1024);
  auto shared = std::make_shared<HashStore>();
  PrefixStore prefixed("/p", shared);
  prefixed.multiSet({{"x", "1"}, {"y", "2"}});
  EXPECT_EQ(shared->get("/p/y"), "2");
}

/// Runs `operation` on `server`'s loop, where a ServedStore must be used, and returns its result.
template <typename Operation>
auto onLoop(test::RunningStore& server, Operation operation) {
  return server.onLoop([&](StoreServer&) { return operation(); });
}

TEST(ServedStore, ItsWritesReachClientsAndWakeTheirWaitsAndClientsWritesReachIt) {
  test::RunningStore server;
  ServedStore served(*server.onLoop([](StoreServer& s) { return &s; }));
  StoreClient client("127.0.0.1", server.port(), 5s, 5s), waiter("127.0.0.1", server.port(), 5s, 5s);
  const auto waiting = [&] { return server.onLoop([](StoreServer& s) { return s.waiterCount(); }) == 1; };
  // A client waiting on two keys: the served store's first write leaves it waiting, the second wakes it.
  auto both = std::async(std::launch::async, [&] { return waiter.wait({"a", "b"}, 30s); });
  ASSERT_TRUE(test::waitUntil(waiting, 10s));
  onLoop(server, [&] { served.set("a", "1"); });
  EXPECT_EQ(both.wait_for(200ms), std::future_status::timeout) << "woken before its second key";
  onLoop(server, [&] { served.multiSet({{"b", "2"}, {"c", "3"}}); });
  EXPECT_TRUE(both.get());
  EXPECT_EQ(client.multiGet({"a", "b", "c"}), (std::vector<std::string>{"1", "2", "3"}));
  // ADD and COMPARE_SET wake as a client's would.
  auto counted = std::async(std::launch::async, [&] { return waiter.wait({"n"}, 30s); });
  ASSERT_TRUE(test::waitUntil(waiting, 10s));
  EXPECT_EQ(onLoop(server, [&] { return served.add("n", 5); }), 5);
  EXPECT_TRUE(counted.get());
  auto swapped = std::async(std::launch::async, [&] { return waiter.wait({"cas"}, 30s); });
  ASSERT_TRUE(test::waitUntil(waiting, 10s));
  EXPECT_EQ(onLoop(server, [&] { return served.compareSet("cas", "", "first"); }), "first");
  EXPECT_TRUE(swapped.get());
  // What clients write, the served store reads at once.
  client.set("from-client", "x");
  EXPECT_EQ(client.add("n", 2), 7);  // its reply also says the SET before it was served
  EXPECT_EQ(onLoop(server, [&] { return served.get("from-client"); }), "x");
  EXPECT_EQ(onLoop(server, [&] { return served.multiGet({"n", "missing"}); }), (std::vector<std::string>{"7", ""}));
  EXPECT_EQ(onLoop(server, [&] { return served.compareSet("cas", "nope", "x"); }), "first");
  onLoop(server, [&] {
    served.erase("from-client");
    served.erase("never");  // a missing key is no error
  });
  EXPECT_FALSE(client.get("from-client").has_value());
}

TEST(ServedStore, AWaitAnswersFromTheKeysThereNowAndNeverBlocksTheLoop) {
  test::RunningStore server;
  ServedStore served(*server.onLoop([](StoreServer& s) { return &s; }));
  StoreClient client("127.0.0.1", server.port(), 5s, 5s);
  client.multiSet({{"here", "1"}, {"empty", ""}, {"text", "abc"}});
  ASSERT_EQ(client.get("text"), "abc");  // a SET has no reply: this one's says the SETs before it were served
  EXPECT_TRUE(onLoop(server, [&] { return served.wait({"here"}, 30s); }));
  EXPECT_FALSE(onLoop(server, [&] { return served.wait({"here", "missing"}, 0ms); }));
  EXPECT_THROW(onLoop(server, [&] { return served.wait({"missing"}, 1ms); }), StoreError);
  EXPECT_FALSE(onLoop(server, [&] { return served.get("empty"); }).has_value()) << "as over TCP";
  EXPECT_THROW(onLoop(server, [&] { return served.add("text", 1); }), StoreError);
  EXPECT_EQ(client.get("text"), "abc");
  EXPECT_NE(served.describe().find("127.0.0.1:" + std::to_string(server.port())), std::string::npos)
      << served.describe();
}

/// Voluntary context switches of thread `tid` of this process so far (each is one wake-up of a sleeping thread).
long voluntarySwitches(pid_t tid) {
  std::ifstream status("/proc/self/task/" + std::to_string(tid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("voluntary_ctxt_switches:", 0) == 0) return std::stol(line.substr(line.find(':') + 1));
  }
  return -1;
}

TEST(StoreClient, AWaitingCancellableClientSleepsUntilTheStopWakesIt) {
  // A thousand idle nodes each wait on the store: a wait that looks at its stop flag on a timer (it was every
  // 250 ms) costs every one of them a wake-up per look. It must sleep until its keys come or the stop does.
  test::RunningStore server;
  CancelFlag cancel;
  StoreClient client("127.0.0.1", server.port(), 5s, 5s, &cancel);
  std::atomic<pid_t> tid{0};
  auto waiting = std::async(std::launch::async, [&] {
    tid = static_cast<pid_t>(::gettid());
    return client.wait({"never"}, 30s);
  });
  ASSERT_TRUE(
      test::waitUntil([&] { return server.onLoop([](store::StoreServer& s) { return s.waiterCount(); }) == 1; }, 10s));
  const long before = voluntarySwitches(tid);
  ASSERT_GE(before, 0);
  std::this_thread::sleep_for(1500ms);  // the window observed, not a wait for readiness
  EXPECT_LE(voluntarySwitches(tid) - before, 1) << "the waiting thread woke up while nothing happened";
  const auto cancelledAt = std::chrono::steady_clock::now();
  cancel = true;
  EXPECT_THROW(waiting.get(), StoreCancelled);
  EXPECT_LT(std::chrono::steady_clock::now() - cancelledAt, 5s);
}

TEST(StoreClient, ACancelledClientEndsAWaitInProgressAtOnceAndStaysUsable) {
  test::RunningStore server;
  CancelFlag cancel{false};
  StoreClient client("127.0.0.1", server.port(), 5s, 5s, &cancel);
  const auto start = std::chrono::steady_clock::now();
  auto waiting = std::async(std::launch::async, [&] { return client.wait({"never"}, 20s); });
  // The wait is registered on the server (one waiter) before the flag is set.
  ASSERT_TRUE(
      test::waitUntil([&] { return server.onLoop([](store::StoreServer& s) { return s.waiterCount(); }) == 1; }, 10s));
  const auto cancelledAt = std::chrono::steady_clock::now();
  cancel = true;
  EXPECT_THROW(waiting.get(), StoreCancelled);
  EXPECT_LT(std::chrono::steady_clock::now() - cancelledAt, 1s);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  EXPECT_EQ(server.onLoop([](store::StoreServer& s) { return s.waiterCount(); }), 0u) << "the server forgot it";
  cancel = false;
  client.set("k", "v");  // the connection is still in step
  EXPECT_EQ(client.get("k"), "v");
}

TEST(PrefixStore, KeysLiveUnderThePrefixAndPrefixesDoNotMeet) {
  auto shared = std::make_shared<HashStore>();
  PrefixStore a("/ddprun.rdzv.a", shared), b("/ddprun.rdzv.b", shared);
  a.set("state", "A");
  b.set("state", "B");
  EXPECT_EQ(shared->get("/ddprun.rdzv.a/state"), "A");
  EXPECT_EQ(a.get("state"), "A");
  EXPECT_EQ(b.get("state"), "B");
  EXPECT_EQ(a.join(std::vector<std::string>{"x", "y"}),
            (std::vector<std::string>{"/ddprun.rdzv.a/x", "/ddprun.rdzv.a/y"}));
}

TEST(HashStore, AWaitOnAFakeClockPassesItsTimeoutThereNotInRealTime) {
  test::FakeClock clock;
  HashStore store(clock);
  EXPECT_FALSE(store.wait({"never"}, 600s));
  EXPECT_EQ(clock.slept(), 600s);
  store.set("now", "1");
  EXPECT_TRUE(store.wait({"now"}, 600s));
  EXPECT_EQ(clock.slept(), 600s);
  EXPECT_THROW((store.set("text", "abc"), store.add("text", 1)), StoreError);
}

TEST(StoreClient, ConnectFailsNamingTheStoreAndACancelEndsTheRetries) {
  const int port = test::freePort();
  try {
    StoreClient nobody("127.0.0.1", static_cast<uint16_t>(port), 300ms, 300ms);
    FAIL() << "connected to nothing";
  } catch (const StoreConnectionError& e) {
    EXPECT_NE(std::string(e.what()).find("c10d store at 127.0.0.1:" + std::to_string(port)), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("cannot connect"), std::string::npos);
  }
  CancelFlag cancel{true};
  test::FakeClock clock;  // the retries' back-off passes on it
  EXPECT_THROW(StoreClient("127.0.0.1", static_cast<uint16_t>(port), 300ms, 600s, &cancel, clock), StoreCancelled);
}

TEST(StoreClient, AReplyThatNeverComesIsAStoreTimeout) {
  // A listener that accepts and never answers.
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor silent(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  StoreClient client("127.0.0.1", silent.local_endpoint().port(), 200ms, 2s);
  EXPECT_THROW(client.get("k"), StoreTimeout);
  EXPECT_THROW(client.get("k"), StoreError);  // reconnects (the backlog accepts) and times out again
}

TEST(StoreClient, WaitTimesOutWithoutLeavingAStaleWakeUp) {
  test::RunningStore server;
  StoreClient client("127.0.0.1", server.port(), 2s, 2s);
  EXPECT_FALSE(client.wait({"k"}, 100ms));
  client.set("k", "v");
  EXPECT_EQ(client.get("k").value_or(""), "v");  // no stray STOP_WAITING byte read as a reply
  EXPECT_TRUE(client.wait({"k"}, 100ms));
}

TEST(StoreClient, RepliesAreReadWhateverWayTheyArriveAndNoByteIsLeftForTheNextReply) {
  // A scripted server: a MULTI_GET reply in two writes split inside a length field, then a timed-out WAIT whose
  // CANCEL_WAIT is answered with STOP_WAITING and WAIT_CANCELED in one write (the keys arrived meanwhile;
  // TCPStore.cpp, doWait), then a GET: the client reads its replies a buffer at a time and must take exactly its own.
  namespace asio = boost::asio;
  asio::io_context io;
  asio::ip::tcp::acceptor listener(io, {asio::ip::make_address("127.0.0.1"), 0});
  const auto request = [](const std::vector<std::string>& keys) {  // MULTI_GET or WAIT: command, count, keys
    size_t size = 1 + 8;
    for (const auto& key : keys) size += 8 + key.size();
    return size;
  };
  const auto i64 = [](int64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); };
  std::string serverError;
  std::thread server([&] {
    try {
      asio::ip::tcp::socket peer(io);
      listener.accept(peer);
      peer.set_option(asio::ip::tcp::no_delay(true));
      std::string in(1024, '\0');
      const auto take = [&](size_t n) { asio::read(peer, asio::buffer(in.data(), n)); };
      take(5);  // VALIDATE
      take(request({"a", "bb"}));
      const std::string reply = i64(1) + "x" + i64(2) + "yy";
      asio::write(peer, asio::buffer(reply.substr(0, 12)));  // "x" and half of the next length
      // Not a wait for anything: it only makes it likely that the client reads the first piece alone (it must read
      // the reply right either way).
      std::this_thread::sleep_for(50ms);
      asio::write(peer, asio::buffer(reply.substr(12)));
      take(request({"k"}));
      take(1);  // CANCEL_WAIT, sent when the WAIT timed out
      const std::string both{static_cast<char>(kStopWaiting), static_cast<char>(kWaitCanceled)};
      asio::write(peer, asio::buffer(both));
      take(1 + 8 + 1);  // GET "k"
      asio::write(peer, asio::buffer(i64(1) + "v"));
      take(1);  // the connection closes: read returns at the end
    } catch (const std::exception& e) {
      if (std::string(e.what()).find("End of file") == std::string::npos) serverError = e.what();
    }
  });
  try {
    StoreClient client("127.0.0.1", listener.local_endpoint().port(), 5s, 5s);
    EXPECT_EQ(client.multiGet({"a", "bb"}), (std::vector<std::string>{"x", "yy"}));
    EXPECT_TRUE(client.wait({"k"}, 100ms)) << "STOP_WAITING came before WAIT_CANCELED: the keys arrived";
    EXPECT_EQ(client.get("k").value_or("<none>"), "v") << "WAIT_CANCELED was read as the GET's reply";
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();  // the client's socket is closed now: the server's next read ends
  }
  server.join();
  EXPECT_EQ(serverError, "");
}

}  // namespace
}  // namespace ddprun::store
