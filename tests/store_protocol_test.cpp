// The store at the byte level: the parser on split and bad frames, the key-value semantics, and the
// server driven by raw sockets in both dialects (2.x as PyTorch's TCPStoreBackend.hpp specifies it,
// 1.13 against bytes captured between python3-torch 1.13's own client and server).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "store/kv_state.hpp"
#include "store/request_parser.hpp"
#include "support/store_fixture.hpp"
#include "support/wait_until.hpp"

namespace ddprun::store {
namespace {
using test::Bytes;
using test::RawClient;
using test::RunningStore;

using namespace test;  // V2 command bytes, validatedClient

/// One feed of `input` to a fresh parser.
struct Parsed {
  RequestParser::Status status;
  size_t consumed = 0;
  Request request;
  std::string error;
  const char* limit = nullptr;
};
Parsed parseOnce(const std::string& input, Dialect dialect, const StoreLimits& limits = {}) {
  RequestParser parser(dialect, limits);
  Parsed out;
  out.status = parser.feed(input, out.consumed);
  if (out.status == RequestParser::Status::kOk) out.request = parser.takeRequest();
  out.error = parser.error();
  out.limit = parser.limitName();
  return out;
}

TEST(RequestParser, NeedsTheWholeFrameWhateverTheSplit) {
  const std::string frame = Bytes().u8(0).str("key").str("value").data();  // 1.13 SET
  for (size_t cut = 0; cut < frame.size(); ++cut) {
    EXPECT_EQ(parseOnce(frame.substr(0, cut), Dialect::kTorch113).status, RequestParser::Status::kNeedMore)
        << "cut at " << cut;
  }
  auto parsed = parseOnce(frame + "trailing", Dialect::kTorch113);
  ASSERT_EQ(parsed.status, RequestParser::Status::kOk);
  EXPECT_EQ(parsed.consumed, frame.size());
  EXPECT_EQ(parsed.request.command, Command::kSet);
  EXPECT_EQ(parsed.request.keys[0], "key");
  EXPECT_EQ(parsed.request.values[0], "value");
}

TEST(RequestParser, ResumesWhereTheLastFeedStoppedAndReadsEachByteOnce) {
  // A key list fed one byte at a time: every feed consumes exactly its byte, and the result equals the
  // request parsed in one piece.
  Bytes frame;
  frame.u8(kMultiSet).u64(3);
  for (int i = 0; i < 3; ++i) frame.str("key" + std::to_string(i)).str(std::string(100 + i, 'v'));
  frame.u8(kGetNumKeys);
  RequestParser parser(Dialect::kTorch2, StoreLimits{});
  const std::string& bytes = frame.data();
  size_t pos = 0;
  RequestParser::Status status = RequestParser::Status::kNeedMore;
  while (status == RequestParser::Status::kNeedMore) {
    ASSERT_LT(pos, bytes.size());
    size_t consumed = 0;
    status = parser.feed(std::string_view(bytes).substr(pos, 1), consumed);
    ASSERT_EQ(consumed, 1u);
    ++pos;
    if (status == RequestParser::Status::kNeedMore) {
      EXPECT_TRUE(parser.inRequest());
    }
  }
  ASSERT_EQ(status, RequestParser::Status::kOk);
  EXPECT_EQ(pos, bytes.size() - 1);
  Request r = parser.takeRequest();
  EXPECT_FALSE(parser.inRequest());
  ASSERT_EQ(r.keys.size(), 3u);
  EXPECT_EQ(r.keys[2], "key2");
  EXPECT_EQ(r.values[2], std::string(102, 'v'));
  size_t consumed = 0;
  EXPECT_EQ(parser.feed(std::string_view(bytes).substr(pos), consumed), RequestParser::Status::kOk);
  EXPECT_EQ(parser.takeRequest().command, Command::kGetNumKeys);
}

TEST(RequestParser, RejectsOversizedFieldsBeforeReadingThemAndNamesTheLimit) {
  StoreLimits limits;
  limits.maxKeyBytes = 16;
  limits.maxRequestBytes = 1000;
  auto parsed = parseOnce(Bytes().u8(kGet).u64(1ull << 40).data(), Dialect::kTorch2, limits);
  ASSERT_EQ(parsed.status, RequestParser::Status::kBad);
  EXPECT_NE(parsed.error.find("GET: key of 1099511627776 bytes exceeds the limit of 16"), std::string::npos)
      << parsed.error;
  EXPECT_STREQ(parsed.limit, "max-key-bytes");
  parsed = parseOnce(Bytes().u8(kWait).u64(1ull << 30).data(), Dialect::kTorch2, limits);
  ASSERT_EQ(parsed.status, RequestParser::Status::kBad);
  EXPECT_NE(parsed.error.find("key count"), std::string::npos) << parsed.error;
  EXPECT_STREQ(parsed.limit, "max-keys-per-request");
  parsed = parseOnce(Bytes().u8(kCheck).u64(200).data(), Dialect::kTorch2, limits);  // 200 keys cannot fit 1000 B
  ASSERT_EQ(parsed.status, RequestParser::Status::kBad);
  EXPECT_STREQ(parsed.limit, "max-request-bytes");
  parsed = parseOnce(Bytes().u8(kSet).str("k").u64(995).data(), Dialect::kTorch2, limits);
  ASSERT_EQ(parsed.status, RequestParser::Status::kBad);
  EXPECT_STREQ(parsed.limit, "max-request-bytes");
  parsed = parseOnce(Bytes().u8(99).data(), Dialect::kTorch2, limits);
  ASSERT_EQ(parsed.status, RequestParser::Status::kBad);
  EXPECT_NE(parsed.error.find("unknown command byte 99"), std::string::npos) << parsed.error;
  EXPECT_EQ(parsed.limit, nullptr);
  EXPECT_EQ(parseOnce(Bytes().u8(9).data(), Dialect::kTorch113, limits).status, RequestParser::Status::kBad);
}

TEST(RequestParser, TellsTheDialectsApart) {
  EXPECT_EQ(detectDialect(Bytes().u8(0).u32(kValidateMagic).data()), Dialect::kTorch2);
  EXPECT_EQ(detectDialect(std::string("\x00\xCE", 2)), std::nullopt);         // could still be either
  EXPECT_EQ(detectDialect(Bytes().u8(0).u64(3).data()), Dialect::kTorch113);  // 1.13 SET
  EXPECT_EQ(detectDialect(Bytes().u8(6).data()), Dialect::kTorch113);         // 1.13 GETNUMKEYS
}

TEST(KvState, WaitersWakeWhenTheirLastKeyArrives) {
  KvState kv;
  KvState::Woken woken;
  EXPECT_FALSE(kv.registerWait(7, {"a", "b"}));
  kv.set("a", "1", woken);
  EXPECT_TRUE(woken.empty());
  kv.add("b", 1, woken);
  EXPECT_EQ(woken, (KvState::Woken{7}));
  EXPECT_EQ(kv.waitingConnections(), 0u);
  EXPECT_TRUE(kv.registerWait(8, {"a", "b"}));
  EXPECT_FALSE(kv.registerWait(9, {"c"}));
  EXPECT_TRUE(kv.cancelWait(9));
  woken.clear();
  kv.set("c", "x", woken);
  EXPECT_TRUE(woken.empty()) << "a cancelled wait must not be woken";
}

TEST(KvState, CompareSetAddAndQueuesFollowTcpStore) {
  KvState kv;
  KvState::Woken woken;
  EXPECT_EQ(*kv.compareSet("k", "x", "y", woken), "x");  // absent, expected not empty: not stored
  EXPECT_FALSE(kv.get("k").has_value());
  EXPECT_EQ(*kv.compareSet("k", "", "y", woken), "y");  // absent, expected empty: stored
  EXPECT_EQ(*kv.compareSet("k", "nope", "z", woken), "y");
  EXPECT_EQ(*kv.compareSet("k", "y", "z", woken), "z");
  // The reply shares the stored value: a compare-set against a 60 MiB value (its client may close at once) copies
  // nothing (20 of them followed by a close held the store for 8.9 s when each reply was a copy).
  kv.compareSet("big", "", std::string(1 << 20, 'b'), woken);
  EXPECT_EQ(kv.compareSet("big", "stale", "new", woken).get(), kv.share("big").get());
  EXPECT_EQ(kv.add("n", 5, woken), 5);
  EXPECT_EQ(kv.add("n", -7, woken), -2);
  EXPECT_EQ(kv.get("n"), "-2");
  EXPECT_FALSE(kv.add("k", 1, woken).has_value());
  EXPECT_EQ(kv.add("edge", INT64_MAX, woken), INT64_MAX);
  EXPECT_FALSE(kv.add("edge", 1, woken).has_value()) << "the sum leaves int64: refused, not wrapped";
  EXPECT_EQ(kv.get("edge"), std::to_string(INT64_MAX));
  kv.queuePush("q", "first", woken);
  kv.queuePush("q", "second", woken);
  EXPECT_TRUE(kv.allExist({"q"}));
  EXPECT_EQ(kv.queueLength("q"), 2);
  EXPECT_EQ(kv.queuePop("q"), (std::pair<int64_t, std::string>{2, "first"}));
  EXPECT_EQ(kv.queuePop("q"), (std::pair<int64_t, std::string>{1, "second"}));
  EXPECT_EQ(kv.queuePop("q").first, 0);
}

TEST(KvState, StoredBytesFollowEveryChangeAndReturnToZero) {
  KvState kv;
  KvState::Woken woken;
  kv.set("a", std::string(100, 'x'), woken);
  EXPECT_EQ(kv.storedBytes(), 1 + 100 + kEntryOverheadBytes);
  kv.set("a", std::string(10, 'x'), woken);
  EXPECT_EQ(kv.storedBytes(), 1 + 10 + kEntryOverheadBytes);
  kv.append("a", "yy", woken);
  kv.add("n", 5, woken);
  kv.compareSet("c", "", "zzz", woken);
  kv.queuePush("q", "item", woken);
  EXPECT_EQ(kv.keyCount(), 4u);
  const auto shared = kv.share("a");
  kv.set("a", "new", woken);
  EXPECT_EQ(*shared, std::string(10, 'x') + "yy") << "a reply holding the old value keeps it unchanged";
  kv.queuePop("q");
  for (const char* key : {"a", "n", "c"}) kv.deleteKey(key);
  EXPECT_EQ(kv.storedBytes(), 0u);
  EXPECT_EQ(kv.keyCount(), 0u);
}

TEST(KvState, AddReadsTheStoredValueAsTorchsServersDo) {
  // std::stoll, as in TCPStoreBackend.cpp: white space first, a sign, digits, anything after them ignored.
  EXPECT_EQ(parseStoredInteger(" 12"), 12);
  EXPECT_EQ(parseStoredInteger("12abc"), 12);
  EXPECT_EQ(parseStoredInteger("+7"), 7);
  EXPECT_EQ(parseStoredInteger("\t-3 "), -3);
  EXPECT_EQ(parseStoredInteger("-9223372036854775808"), INT64_MIN);
  EXPECT_FALSE(parseStoredInteger("").has_value());
  EXPECT_FALSE(parseStoredInteger("abc").has_value());
  EXPECT_FALSE(parseStoredInteger("- 1").has_value());
  EXPECT_FALSE(parseStoredInteger("99999999999999999999").has_value());
  KvState kv;
  KvState::Woken woken;
  kv.set("n", " 12", woken);
  EXPECT_EQ(kv.add("n", 1, woken), 13);
  EXPECT_EQ(kv.get("n"), "13");
}

TEST(StoreServer, SpeaksTheTorch2DialectForEveryOperation) {
  RunningStore store;
  RawClient c = validatedClient(store.port());
  c.send(Bytes().u8(kSet).str("/k1").str("v1"));
  c.send(Bytes().u8(kWait).u64(1).str("/k1"));
  EXPECT_EQ(c.readU8(), kStopWaiting);
  c.send(Bytes().u8(kGet).str("/k1"));
  EXPECT_EQ(c.readBytes(), "v1");
  c.send(Bytes().u8(kAdd).str("/cnt").u64(5));
  EXPECT_EQ(c.readI64(), 5);
  c.send(Bytes().u8(kCompareSet).str("/k1").str("v1").str("v2"));
  EXPECT_EQ(c.readBytes(), "v2");
  c.send(Bytes().u8(kCheck).u64(2).str("/k1").str("/cnt"));
  EXPECT_EQ(c.readU8(), kCheckReady);
  c.send(Bytes().u8(kCheck).u64(2).str("/k1").str("/none"));
  EXPECT_EQ(c.readU8(), kCheckNotReady);
  c.send(Bytes().u8(kGetNumKeys));
  EXPECT_EQ(c.readI64(), 2);
  c.send(Bytes().u8(kAppend).str("/k1").str("+tail"));
  c.send(Bytes().u8(kMultiSet).u64(2).str("/a").str("A").str("/b").str("B"));
  c.send(Bytes().u8(kMultiGet).u64(3).str("/k1").str("/a").str("/b"));
  EXPECT_EQ(c.readBytes(), "v2+tail");
  EXPECT_EQ(c.readBytes(), "A");
  EXPECT_EQ(c.readBytes(), "B");
  c.send(Bytes().u8(kDeleteKey).str("/a"));
  EXPECT_EQ(c.readI64(), 1);
  c.send(Bytes().u8(kDeleteKey).str("/a"));
  EXPECT_EQ(c.readI64(), 0);
  c.send(Bytes().u8(kListKeys));
  ASSERT_EQ(c.readI64(), 3);
  EXPECT_EQ(c.readBytes(), "/b");
  EXPECT_EQ(c.readBytes(), "/cnt");
  EXPECT_EQ(c.readBytes(), "/k1");
  c.send(Bytes().u8(kQueuePush).str("q").str("job1"));
  c.send(Bytes().u8(kQueueLen).str("q"));
  EXPECT_EQ(c.readI64(), 1);
  c.send(Bytes().u8(kQueuePop).str("q"));
  EXPECT_EQ(c.readI64(), 1);
  EXPECT_EQ(c.readBytes(), "job1");
  c.send(Bytes().u8(kQueuePop).str("q"));
  EXPECT_EQ(c.readI64(), 0);
  c.send(Bytes().u8(kPing).u32(77));
  EXPECT_EQ(c.readU32(), 77u);
}

TEST(StoreServer, DeferredWaitIsAnsweredWhenAnotherClientSetsTheKey) {
  RunningStore store;
  RawClient waiter = validatedClient(store.port());
  RawClient setter = validatedClient(store.port());
  waiter.send(Bytes().u8(kWait).u64(2).str("x").str("y"));
  EXPECT_TRUE(waiter.silentFor(100));
  setter.send(Bytes().u8(kSet).str("x").str("1"));
  EXPECT_TRUE(waiter.silentFor(100)) << "woken before its second key";
  setter.send(Bytes().u8(kAdd).str("y").u64(1));
  EXPECT_EQ(setter.readI64(), 1);
  EXPECT_EQ(waiter.readU8(), kStopWaiting);
}

TEST(StoreServer, CancelWaitAnswersCanceledAndWithdrawsTheWait) {
  RunningStore store;
  RawClient c = validatedClient(store.port());
  RawClient other = validatedClient(store.port());
  c.send(Bytes().u8(kWait).u64(1).str("never"));
  EXPECT_TRUE(c.silentFor(100));
  c.send(Bytes().u8(kCancelWait));
  EXPECT_EQ(c.readU8(), kWaitCanceled);
  other.send(Bytes().u8(kSet).str("never").str("now"));
  EXPECT_TRUE(c.silentFor(200)) << "a cancelled wait must not be answered later";
  // The race: the key arrives before CANCEL_WAIT, so the client reads STOP_WAITING, then WAIT_CANCELED.
  c.send(Bytes().u8(kWait).u64(1).str("late"));
  other.send(Bytes().u8(kSet).str("late").str("1"));
  EXPECT_EQ(c.readU8(), kStopWaiting);
  c.send(Bytes().u8(kCancelWait));
  EXPECT_EQ(c.readU8(), kWaitCanceled);
}

TEST(StoreServer, OneSetWakesEveryWaiterAtOnceAndForgetsTheClosedOnes) {
  // As c10d's server does: every waiter whose keys all exist is sent STOP_WAITING by the request that completed
  // them, none of them asking anything more. Every tenth waiter closes first: it is forgotten, not woken.
  RunningStore store;
  RawClient setter = validatedClient(store.port());
  std::vector<RawClient> waiters;
  for (int i = 0; i < 100; ++i) {
    waiters.push_back(validatedClient(store.port()));
    waiters.back().send(Bytes().u8(kWait).u64(1).str("go"));
  }
  const auto waiting = [&] { return store.onLoop([](StoreServer& s) { return s.waiterCount(); }); };
  ASSERT_TRUE(test::waitUntil([&] { return waiting() == 100; }, std::chrono::seconds(10)));
  std::vector<RawClient> open;
  for (size_t i = 0; i < waiters.size(); ++i) {
    if (i % 10 != 0) open.push_back(std::move(waiters[i]));
  }
  waiters.clear();  // closes every tenth
  ASSERT_TRUE(test::waitUntil([&] { return waiting() == 90; }, std::chrono::seconds(10)));
  setter.send(Bytes().u8(kSet).str("go").str("1").u8(kPing).u32(5));
  EXPECT_EQ(setter.readU32(), 5u);
  for (size_t i = 0; i < open.size(); ++i) EXPECT_EQ(open[i].readU8(), kStopWaiting) << "waiter " << i;
  EXPECT_EQ(waiting(), 0u);
  for (auto& waiter : open) EXPECT_TRUE(waiter.silentFor(0)) << "one STOP_WAITING each";
}

TEST(StoreServer, BarrierReleasesEveryoneWhenTheLastArrives) {
  RunningStore store;
  RawClient a = validatedClient(store.port());
  RawClient b = validatedClient(store.port());
  a.send(Bytes().u8(kBarrier).str("bar").u64(2));
  EXPECT_TRUE(a.silentFor(100));
  b.send(Bytes().u8(kBarrier).str("bar").u64(2));
  EXPECT_EQ(b.readU8(), 0);
  EXPECT_EQ(a.readU8(), 0);
}

// Bytes recorded between python3-torch 1.13.1's TCPStore client and server (notes §2.5).
TEST(StoreServer, AnswersTheCapturedTorch113Exchange) {
  RunningStore store;
  RawClient c(store.port());
  auto hex = [](const std::string& h) {
    std::string out;
    for (size_t i = 0; i + 1 < h.size(); i += 2)
      out.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
    return out;
  };
  c.send(
      hex("00"
          "0300000000000000"
          "2f6b31"
          "0200000000000000"
          "7631"));  // set /k1 = v1
  c.send(
      hex("05"
          "0100000000000000"
          "0300000000000000"
          "2f6b31"));  // wait /k1
  EXPECT_EQ(c.read(1), hex("00"));
  c.send(
      hex("02"
          "0300000000000000"
          "2f6b31"));  // get /k1
  EXPECT_EQ(c.read(10), hex("0200000000000000"
                            "7631"));
  c.send(
      hex("03"
          "0400000000000000"
          "2f636e74"
          "0500000000000000"));  // add /cnt 5
  EXPECT_EQ(c.read(8), hex("0500000000000000"));
  c.send(
      hex("01"
          "0300000000000000"
          "2f6b31"
          "0200000000000000"
          "7631"
          "0200000000000000"
          "7632"));
  EXPECT_EQ(c.read(10), hex("0200000000000000"
                            "7632"));
  c.send(hex("06"));
  EXPECT_EQ(c.read(8), hex("0200000000000000"));
  c.send(
      hex("08"
          "0300000000000000"
          "2f6b31"));
  EXPECT_EQ(c.read(8), hex("0100000000000000"));
  c.send(
      hex("02"
          "0400000000000000"
          "2f636e74"));
  EXPECT_EQ(c.read(9), hex("0100000000000000"
                           "35"));
}

TEST(StoreServer, MalformedRequestsCloseOnlyTheirConnection) {
  RunningStore store;
  RawClient healthy = validatedClient(store.port());
  {
    RawClient badMagic(store.port());
    // A wrong magic reads as a 1.13 SET with an absurd key length, which is over the limit as well.
    badMagic.send(Bytes().u8(kValidate).u32(0xDEADBEEF).u8(kPing).u32(1));
    EXPECT_TRUE(badMagic.closedByServer());
  }
  {
    RawClient huge = validatedClient(store.port());
    huge.send(Bytes().u8(kSet).u64(1ull << 50));
    EXPECT_TRUE(huge.closedByServer());
  }
  {
    RawClient unknown = validatedClient(store.port());
    unknown.send(Bytes().u8(200));
    EXPECT_TRUE(unknown.closedByServer());
  }
  {
    RawClient notANumber = validatedClient(store.port());
    notANumber.send(Bytes().u8(kSet).str("text").str("abc").u8(kAdd).str("text").u64(1));
    EXPECT_TRUE(notANumber.closedByServer());
  }
  {
    RawClient waitsThenDies = validatedClient(store.port());
    waitsThenDies.send(Bytes().u8(kWait).u64(1).str("ghost"));
  }
  healthy.send(Bytes().u8(kSet).str("ghost").str("1").u8(kAdd).str("alive").u64(1));
  EXPECT_EQ(healthy.readI64(), 1);
}

TEST(StoreServer, ASilentClientWithAHalfSentRequestBlocksNobody) {
  RunningStore store;
  RawClient stalled = validatedClient(store.port());
  stalled.send(Bytes().u8(kSet).u64(100).data() + "only-part-of-the-key");
  RawClient other = validatedClient(store.port());
  other.send(Bytes().u8(kAdd).str("n").u64(3));
  EXPECT_EQ(other.readI64(), 3);
}

TEST(StoreServer, ManyConcurrentClientsAddWithoutLosingUpdates) {
  RunningStore store;
  constexpr int kClients = 32, kAdds = 200;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kClients; ++t) {
    threads.emplace_back([&, t] {
      try {
        RawClient c = t % 2 ? validatedClient(store.port()) : RawClient(store.port());  // both dialects at once
        const uint8_t add = t % 2 ? kAdd : 3;                                           // 1.13's ADD is 3
        for (int i = 0; i < kAdds; ++i) {
          c.send(Bytes().u8(add).str("total").u64(1));
          c.readI64();
        }
      } catch (const std::exception&) {
        ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  RawClient c = validatedClient(store.port());
  c.send(Bytes().u8(kAdd).str("total").u64(0));
  EXPECT_EQ(c.readI64(), kClients * kAdds);
}

}  // namespace
}  // namespace ddprun::store
