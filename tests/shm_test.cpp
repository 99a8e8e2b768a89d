// The shm backend in process, its ranks as threads: the sums (against c10's own bf16 arithmetic), the group's
// collectives over a real segment (chunks, shares, every dtype), its failures (a rank that never comes, a
// group given up, shutdown), the segment's checks, the communicator over an in-memory store (2 ranks equal
// Gloo bit for bit, several hosts through leaders, the helper thread) and the /dev/shm clean-up. Real
// processes: worker_integration_test.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/shm_names.hpp"
#include "support/child_process.hpp"
#include "support/thread_ranks.hpp"
#include "worker/comm/c10d_communicator.hpp"
#include "worker/comm/shm_bootstrap.hpp"
#include "worker/comm/shm_group.hpp"
#include "worker/comm/shm_reduce.hpp"

namespace ddprun::worker {
namespace {
namespace fs = std::filesystem;
using test::spawnRanks;

std::string uniqueRunId() { return "shm-test-" + randomHex128().substr(0, 12); }

/// Groups of `ranks` over one fresh segment, made in rank order (rank 0 writes the control block first).
std::vector<std::unique_ptr<ShmGroup>> makeGroups(int ranks, ShmGroupOptions options) {
  std::vector<int> globals;
  for (int r = 0; r < ranks; ++r) globals.push_back(r);
  const size_t size = ShmGroup::segmentBytes(ranks, options.slotBytes);
  const std::string name = shmSegmentName(uniqueRunId(), 0, randomHex128());
  std::vector<std::unique_ptr<ShmGroup>> groups;
  groups.push_back(std::make_unique<ShmGroup>(ShmSegment::create(name, size), 0, globals, 42, options));
  for (int r = 1; r < ranks; ++r) {
    groups.push_back(std::make_unique<ShmGroup>(ShmSegment::open(name, size), r, globals, 42, options));
  }
  return groups;
}

ShmGroupOptions smallSlots(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  ShmGroupOptions options;
  options.slotBytes = 4096;  // tensors below span several chunks
  options.timeout = timeout;
  return options;
}

TEST(ShmReduce, Bf16SumsOfTwoEqualC10sAdditionBitForBit) {
  auto gen = at::detail::createCPUGenerator(7);
  torch::Tensor a = (torch::randn({4099}, gen) * 100).to(torch::kBFloat16);
  torch::Tensor b = (torch::randn({4099}, gen) * 0.01).to(torch::kBFloat16);
  a[3] = std::numeric_limits<float>::quiet_NaN();
  b[4] = std::numeric_limits<float>::infinity();
  torch::Tensor out = torch::empty_like(a);
  const void* srcs[] = {a.data_ptr(), b.data_ptr()};
  sumInto(ShmDtype::kBFloat16, out.data_ptr(), srcs, 2, 4099);
  const torch::Tensor expected = a + b;           // c10::BFloat16 arithmetic
  EXPECT_TRUE(std::isnan(out[3].item<float>()));  // NaN payloads differ between c10's own code paths
  out[3] = expected[3];
  EXPECT_TRUE(torch::equal(out.view(torch::kInt16), expected.view(torch::kInt16)));
  // Many values: summed in float32 and rounded once, unlike a chain of bf16 additions.
  torch::Tensor c = torch::full({3}, 1.0, torch::kBFloat16), d = torch::full({3}, 1.0 / 512, torch::kBFloat16);
  const void* four[] = {c.data_ptr(), d.data_ptr(), d.data_ptr(), d.data_ptr()};
  sumInto(ShmDtype::kBFloat16, out.data_ptr(), four, 4, 3);
  EXPECT_FLOAT_EQ(out[0].item<float>(), 1.0f + 1.0f / 128);  // 1 + 3/512 rounds to 1 + 1/128
}

TEST(ShmReduce, SumsEveryDtypeInRankOrderInPlace) {
  std::vector<float> x{1.5f, 1e8f}, y{2.25f, 1.0f}, z{-1.0f, -1e8f};
  const void* srcs[] = {x.data(), y.data(), z.data()};
  sumInto(ShmDtype::kFloat32, x.data(), srcs, 3, 2);  // dst is the first source
  EXPECT_EQ(x[0], 2.75f);
  EXPECT_EQ(x[1], 0.0f) << "(1e8 + 1) - 1e8 in float32, in rank order";
  std::vector<int64_t> i{1LL << 40, 3}, j{5, -3};
  const void* ints[] = {i.data(), j.data()};
  sumInto(ShmDtype::kInt64, j.data(), ints, 2, 2);
  EXPECT_EQ(j, (std::vector<int64_t>{(1LL << 40) + 5, 0}));
}

TEST(ShmGroup, AllreduceSumsInRankOrderAcrossChunksAndEveryRankGetsTheSameBits) {
  for (int ranks : {1, 2, 3, 4}) {
    auto groups = makeGroups(ranks, smallSlots());
    constexpr int64_t kCount = 10007;  // 40 KB of float32: 10 chunks of 4 KiB, shares of uneven length
    std::vector<torch::Tensor> inputs, outputs(static_cast<size_t>(ranks));
    for (int r = 0; r < ranks; ++r)
      inputs.push_back(torch::randn({kCount}, at::detail::createCPUGenerator(r)) * (r + 1));
    spawnRanks(ranks, [&](int rank) {
      groups[rank]->attach();
      torch::Tensor t = inputs[rank].clone();
      groups[rank]->allreduceSum(t.data_ptr(), kCount, ShmDtype::kFloat32);
      outputs[rank] = t;
    });
    torch::Tensor expected = inputs[0].clone();
    for (int r = 1; r < ranks; ++r) expected += inputs[r];
    for (int r = 0; r < ranks; ++r) EXPECT_TRUE(torch::equal(outputs[r], expected)) << ranks << " ranks, rank " << r;
  }
}

TEST(ShmGroup, AllreduceOfEveryDtypeAndBroadcastFromAnyRoot) {
  constexpr int kRanks = 3;
  auto groups = makeGroups(kRanks, smallSlots());
  std::vector<torch::Tensor> doubles(kRanks), longs(kRanks), bf16(kRanks), sent(kRanks);
  spawnRanks(kRanks, [&](int rank) {
    ShmGroup& g = *groups[rank];
    g.attach();
    doubles[rank] = torch::full({3}, 0.1 * (rank + 1), torch::kFloat64);
    g.allreduceSum(doubles[rank].data_ptr(), 3, ShmDtype::kFloat64);
    longs[rank] = torch::arange(5000, torch::kInt64) * (rank + 1);
    g.allreduceSum(longs[rank].data_ptr(), 5000, ShmDtype::kInt64);
    bf16[rank] = torch::full({2049}, 1.0 + rank, torch::kBFloat16);
    g.allreduceSum(bf16[rank].data_ptr(), 2049, ShmDtype::kBFloat16);
    g.barrier();
    sent[rank] = rank == 2 ? torch::arange(3001, torch::kInt32) : torch::zeros({3001}, torch::kInt32);
    g.broadcast(sent[rank].data_ptr(), sent[rank].nbytes(), 2);  // 12 KB: three chunks and a tail
  });
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_TRUE(torch::equal(doubles[r], torch::full({3}, 0.1 + 0.2 + 0.30000000000000004, torch::kFloat64)));
    EXPECT_TRUE(torch::equal(longs[r], torch::arange(5000, torch::kInt64) * 6));
    EXPECT_TRUE(torch::equal(bf16[r], torch::full({2049}, 6.0, torch::kBFloat16)));
    EXPECT_TRUE(torch::equal(sent[r], torch::arange(3001, torch::kInt32))) << r;
  }
}

TEST(ShmGroup, ARankThatNeverComesFailsTheCollectiveAfterTheTimeoutNamingIt) {
  auto groups = makeGroups(2, smallSlots(std::chrono::milliseconds(300)));
  std::string error;
  spawnRanks(2, [&](int rank) {
    groups[rank]->attach();
    if (rank == 1) return;  // attached, then stops taking part
    float value = 1;
    try {
      groups[0]->allreduceSum(&value, 1, ShmDtype::kFloat32);
    } catch (const CollectiveError& e) {
      error = e.what();
    }
  });
  EXPECT_EQ(error,
            "backend shm: rank 1 did not reach allreduce (collective 2) within 0.3 s (hung, stalled or killed?)");
}

TEST(ShmGroup, AttachTimesOutNamingTheMissingRankAndLeavesNoSegment) {
  ShmGroupOptions options = smallSlots(std::chrono::milliseconds(200));
  const std::string runId = uniqueRunId();
  const std::string name = shmSegmentName(runId, 3, randomHex128());
  ShmGroup alone(ShmSegment::create(name, ShmGroup::segmentBytes(2, options.slotBytes)), 0, {0, 1}, 1, options);
  try {
    alone.attach();
    FAIL() << "attached without its peer";
  } catch (const CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 did not reach the group's start (collective 1) within 0.2 s"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(fs::exists(std::string(kShmDir) + "/" + name)) << "the creator keeps its segment while it lives";
  EXPECT_EQ(removeShmSegments(runId, 4).removed.size(), 0u) << "another attempt's clean-up must not touch it";
  EXPECT_EQ(removeShmSegments(runId, 3).removed, std::vector<std::string>{name});
}

TEST(ShmGroup, AGroupGivenUpByOneRankFailsTheOthersAtOnce) {
  // Rank 2 never comes; rank 0 gives up after 0.3 s and marks the group; rank 1, whose own timeout is a
  // minute, fails with rank 0's reason rather than its own timeout.
  constexpr int kRanks = 3;
  std::vector<int> globals{0, 1, 2};
  ShmGroupOptions quick = smallSlots(std::chrono::milliseconds(300)), patient = smallSlots(std::chrono::seconds(60));
  const size_t size = ShmGroup::segmentBytes(kRanks, quick.slotBytes);
  const std::string name = shmSegmentName(uniqueRunId(), 0, randomHex128());
  ShmGroup g0(ShmSegment::create(name, size), 0, globals, 9, quick);
  ShmGroup g1(ShmSegment::open(name, size), 1, globals, 9, patient);
  ShmGroup g2(ShmSegment::open(name, size), 2, globals, 9, patient);
  std::vector<std::string> errors(kRanks);
  spawnRanks(kRanks, [&](int rank) {
    ShmGroup& g = rank == 0 ? g0 : rank == 1 ? g1 : g2;
    g.attach();
    if (rank == 2) return;
    try {
      g.barrier();
    } catch (const CollectiveError& e) {
      errors[rank] = e.what();
    }
  });
  EXPECT_NE(errors[0].find("rank 2 did not reach barrier"), std::string::npos) << errors[0];
  EXPECT_EQ(errors[1].rfind("backend shm: rank 0 gave the group up during barrier (collective 2): backend shm: rank 2 "
                            "did not reach barrier",
                            0),
            0u)
      << errors[1];
}

TEST(ShmGroup, CancelEndsAWaitFromAnotherThread) {
  auto groups = makeGroups(2, smallSlots(std::chrono::seconds(60)));
  std::string error;
  spawnRanks(2, [&](int rank) {
    groups[rank]->attach();
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      groups[0]->cancel();
      return;
    }
    try {
      groups[0]->barrier();
    } catch (const CollectiveError& e) {
      error = e.what();
    }
  });
  EXPECT_NE(error.find("rank 0 is shutting down during barrier"), std::string::npos) << error;
}

TEST(ShmSegment, IsPrivateExactAndGoneOnceEveryRankAttached) {
  const std::string name = shmSegmentName(uniqueRunId(), 0, randomHex128());
  const std::string path = std::string(kShmDir) + "/" + name;
  ShmSegment made = ShmSegment::create(name, 8192);
  struct stat info {};
  ASSERT_EQ(::stat(path.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  EXPECT_THROW(ShmSegment::create(name, 8192), Error) << "names are taken exclusively";
  try {
    ShmSegment::open(name, 4096);
    FAIL() << "opened a segment of another size";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is 8192 bytes, not the 4096 announced: refusing to use it"),
              std::string::npos)
        << e.what();
  }
  ::chmod(path.c_str(), 0644);
  try {
    ShmSegment::open(name, 8192);
    FAIL() << "opened a segment others can read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has mode 0644, not 0600"), std::string::npos) << e.what();
  }
  ::chmod(path.c_str(), 0600);
  EXPECT_NO_THROW(ShmSegment::open(name, 8192));
  made.unlink();
  EXPECT_FALSE(fs::exists(path));

  // A group removes its segment's name as soon as every rank has attached.
  auto groups = makeGroups(2, smallSlots());
  spawnRanks(2, [&](int rank) { groups[rank]->attach(); });
  // (makeGroups' name is random; look for any of its run's files.)
  for (const auto& entry : fs::directory_iterator(kShmDir)) {
    EXPECT_EQ(entry.path().filename().string().find("ddprun-shm-shm-test-"), std::string::npos) << entry.path();
  }
}

TEST(ShmSegment, AForeignGroupInTheSegmentIsRefused) {
  ShmGroupOptions options = smallSlots();
  const size_t size = ShmGroup::segmentBytes(2, options.slotBytes);
  const std::string name = shmSegmentName(uniqueRunId(), 0, randomHex128());
  ShmGroup creator(ShmSegment::create(name, size), 0, {0, 1}, 1234, options);
  try {
    ShmGroup impostor(ShmSegment::open(name, size), 1, {0, 1}, 999, options);
    FAIL() << "accepted a segment announced with another nonce";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not hold the group announced in the store"), std::string::npos)
        << e.what();
  }
}

TEST(ShmNames, PrefixesAreDistinctPerRunAndCleanUpTouchesOnlyItsRun) {
  EXPECT_EQ(shmRunPrefix("job-7"), "ddprun-shm-job%2D7-");
  EXPECT_EQ(shmSegmentName("a/b", 2, "0f"), "ddprun-shm-a%2Fb-a2-0f");
  EXPECT_NE(shmRunPrefix("a").substr(0, 13), shmRunPrefix("a-b").substr(0, 13)) << "'a' must not prefix 'a-b'";
  EXPECT_LE(shmRunPrefix(std::string(500, 'x')).size(), 40u);
  const std::string dir = test::makeTempDir("shmnames");
  for (const std::string& name :
       {shmSegmentName("job", 0, "aa"), shmSegmentName("job", 1, "bb"), shmSegmentName("job-2", 0, "cc"),
        shmSegmentName("jo", 0, "dd"), std::string("unrelated")}) {
    std::ofstream(dir + "/" + name) << "x";
  }
  EXPECT_EQ(removeShmSegments("job", 1, dir).removed, std::vector<std::string>{shmSegmentName("job", 1, "bb")});
  EXPECT_EQ(removeShmSegments("job", std::nullopt, dir).removed,
            std::vector<std::string>{shmSegmentName("job", 0, "aa")});
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 3);
  EXPECT_EQ(removeShmSegments("job", std::nullopt, dir + "/missing").errors.size(), 1u);
  fs::remove_all(dir);
}

/// formShmCommunicator for each rank over one in-memory store, ranks as threads.
struct ThreadJob {
  explicit ThreadJob(int ranks) : store(c10::make_intrusive<c10d::HashStore>()), ranks(ranks) {
    store->setTimeout(std::chrono::seconds(20));
  }
  ShmMember member(int rank) const {
    ShmMember m;
    m.rank = rank;
    m.worldSize = ranks;
    m.runId = runId;
    m.options.timeout = std::chrono::seconds(20);
    return m;
  }
  c10::intrusive_ptr<c10d::HashStore> store;
  int ranks;
  std::string runId = uniqueRunId();
};

/// Whether this worker was built with Gloo: a pip CUDA torch ships no Gloo headers, and such a build refuses Gloo
/// (worker/CMakeLists.txt), so the tests that need it are skipped there.
constexpr bool kGlooBuilt =
#ifdef DDPRUN_WITH_GLOO
    true;
#else
    false;
#endif

TEST(ShmCommunicator, TwoRanksSumBitForBitAsGlooDoes) {
  if (!kGlooBuilt) GTEST_SKIP() << "this worker is built without Gloo";
  ThreadJob job(2);
  auto glooStore = c10::make_intrusive<c10d::HashStore>();
  std::vector<torch::Tensor> viaShm(2), viaGloo(2);
  spawnRanks(2, [&](int rank) {
    auto shm = formShmCommunicator(job.store, job.member(rank));
    auto gloo = makeGlooCommunicator({glooStore, rank, 2, "127.0.0.1", std::chrono::seconds(20)});
    EXPECT_EQ(shm->backendName(), "shm");
    auto gen = at::detail::createCPUGenerator(100 + rank);
    const torch::Tensor input = torch::randn({203530}, gen) * std::pow(10.0, rank * 3);  // the MLP's 0.8 MB
    viaShm[rank] = input.clone();
    viaGloo[rank] = input.clone();
    shm->allreduceSum(viaShm[rank]);
    gloo->allreduceSum(viaGloo[rank]);
  });
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(torch::equal(viaShm[rank].view(torch::kInt32), viaGloo[rank].view(torch::kInt32))) << rank;
  }
}

TEST(ShmCommunicator, AllreduceSumAsyncReturnsBeforeThePeersArrive) {
  ThreadJob job(2);
  std::mutex mutex;
  std::condition_variable cv;
  bool rank0Returned = false;
  std::vector<float> results(2);
  spawnRanks(2, [&](int rank) {
    auto comm = formShmCommunicator(job.store, job.member(rank));
    torch::Tensor t = torch::full({1000}, rank + 1.0f);
    if (rank == 1) {
      // Rank 1 joins only once rank 0's call has returned: a blocking call would never return.
      std::unique_lock<std::mutex> lock(mutex);
      ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(20), [&] { return rank0Returned; }))
          << "allreduceSumAsync blocked on its peer";
    }
    auto pending = comm->allreduceSumAsync(t);
    if (rank == 0) {
      std::lock_guard<std::mutex> lock(mutex);
      rank0Returned = true;
      cv.notify_all();
    }
    pending->wait();
    results[rank] = t[999].item<float>();
  });
  EXPECT_EQ(results, (std::vector<float>{3.0f, 3.0f}));
}

TEST(ShmCommunicator, SeveralHostsReduceThroughTheirLeaders) {
  if (!kGlooBuilt) GTEST_SKIP() << "this worker is built without Gloo";
  // Ranks 0 and 2 on host "a", 1 and 3 on "b": two shm groups, Gloo between ranks 0 and 1.
  ThreadJob job(4);
  std::vector<torch::Tensor> sums(4), sent(4);
  std::vector<std::string> names(4);
  spawnRanks(4, [&](int rank) {
    ShmMember m = job.member(rank);
    m.nodeKey = rank % 2 == 0 ? "a" : "b";
    m.allOnOneNode = false;
    auto comm = formShmCommunicator(job.store, m);
    names[rank] = comm->backendName();
    sums[rank] = torch::full({70000}, std::pow(2.0f, rank));  // 280 KB: several chunks
    comm->allreduceSum(sums[rank]);
    sent[rank] = torch::full({5}, rank == 3 ? 7.0 : 0.0, torch::kFloat64);
    comm->broadcast(sent[rank], 3);
    comm->barrier();
  });
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(names[rank], "shm+gloo");
    EXPECT_TRUE(torch::equal(sums[rank], torch::full({70000}, 15.0f))) << rank;
    EXPECT_TRUE(torch::equal(sent[rank], torch::full({5}, 7.0, torch::kFloat64))) << rank;
  }
}

TEST(ShmCommunicator, AutoUsesPlainGlooWhenNoHostHasTwoRanks) {
  if (!kGlooBuilt) GTEST_SKIP() << "this worker is built without Gloo";
  ThreadJob job(2);
  std::vector<std::string> names(2);
  spawnRanks(2, [&](int rank) {
    ShmMember m = job.member(rank);
    m.nodeKey = "host" + std::to_string(rank);
    m.allOnOneNode = false;
    m.glooIfOneRankPerNode = true;
    auto comm = formShmCommunicator(job.store, m);
    names[rank] = comm->backendName();
    torch::Tensor t = torch::ones({3});
    comm->allreduceSum(t);
    EXPECT_EQ(t[0].item<float>(), 2.0f);
  });
  EXPECT_EQ(names, (std::vector<std::string>{"gloo", "gloo"}));
}

TEST(ShmCommunicator, RefusesTensorsItCannotSum) {
  ThreadJob job(1);
  auto comm = formShmCommunicator(job.store, job.member(0));
  torch::Tensor half = torch::ones({4}, torch::kHalf);
  EXPECT_THROW(comm->allreduceSumAsync(half), Error);
  torch::Tensor strided = torch::ones({4, 4}).t();
  EXPECT_THROW(comm->allreduceSumAsync(strided), Error);
}

}  // namespace
}  // namespace ddprun::worker
