// The static rendezvous (torchrun's static_tcp_rendezvous): fixed node ranks, node 0's store, worker counts
// exchanged for contiguous ranks, on ddprun's real store and the in-memory one. The dynamic (ticket)
// rendezvous has its own tests in ticket_rendezvous_test.cpp.
#include <gtest/gtest.h>

#include <atomic>
#include <future>

#include "rendezvous/static_rendezvous.hpp"
#include "store/hash_store.hpp"
#include "store/store_client.hpp"
#include "support/store_fixture.hpp"
#include "support/wait_until.hpp"

namespace ddprun::rendezvous {
namespace {
using namespace std::chrono_literals;

NodeDescriptor node(const std::string& id, int nproc = 1) {
  return NodeDescriptor{id, "addr-" + id, nproc, "store-" + id, 1000 + static_cast<int>(id.size())};
}

TEST(StaticRendezvous, NodesExchangeTheirWorkerCountsForContiguousRanks) {
  test::RunningStore store;
  CancelFlag cancel{false};
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
  CancelFlag cancel{false};
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
  CancelFlag cancel{false};
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
