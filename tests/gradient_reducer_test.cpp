// The gradient reducer's policy, with the ranks as threads of this process (support/thread_ranks.hpp):
// bucket assignment, averaging, launch order, overlap with backward, and the unused-parameter error. The
// same arithmetic over real processes and backends is proven end to end by worker_integration_test's DDP
// equivalence tests.
#include <gtest/gtest.h>

#include <atomic>

#include "common/error.hpp"
#include "support/thread_ranks.hpp"
#include "worker/gradient_reducer.hpp"

namespace ddprun::worker {
namespace {

using Buckets = std::vector<std::vector<size_t>>;
using test::spawnRanks;
using test::ThreadCommunicator;
using test::ThreadGroup;

TEST(AssignBuckets, FillsInReverseParameterOrderUpToTheCap) {
  // Sizes in bytes of parameters 0..4.
  EXPECT_EQ(assignBuckets({100, 100, 100, 100, 100}, 250), (Buckets{{4, 3, 2}, {1, 0}}));
  EXPECT_EQ(assignBuckets({100, 100, 100}, 1000), (Buckets{{2, 1, 0}}));
  // A tensor larger than the cap closes its bucket at once.
  EXPECT_EQ(assignBuckets({10, 5000, 10, 10}, 100), (Buckets{{3, 2, 1}, {0}}));
  EXPECT_EQ(assignBuckets({10, 10}, 1), (Buckets{{1}, {0}}));
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

/// A parameter with deterministic values (the global generator is shared by the rank threads).
torch::Tensor param(std::vector<int64_t> shape, double start) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return (torch::arange(n, torch::kFloat32) * 0.1 + start).reshape(shape).requires_grad_(true);
}

/// Two chained layers: backward produces w1's gradient before w0's.
struct Chain {
  torch::Tensor w0 = param({4, 3}, -0.5), b0 = param({3}, 0.2), w1 = param({3, 2}, 0.3);
  std::vector<torch::Tensor> params() const { return {w0, b0, w1}; }
  torch::Tensor loss(const torch::Tensor& x) const { return torch::tanh(x.matmul(w0) + b0).matmul(w1).pow(2).sum(); }
};

std::vector<torch::Tensor> gradients(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : params) grads.push_back(p.grad().clone());
  return grads;
}

TEST(GradientReducer, EveryRankEndsWithTheMeanOfAllRanksGradients) {
  for (bool overlap : {true, false}) {
    constexpr int kRanks = 3;
    ThreadGroup group(kRanks);
    std::vector<std::vector<torch::Tensor>> local(kRanks), reduced(kRanks);
    spawnRanks(kRanks, [&](int rank) {
      Chain net;
      ThreadCommunicator comm(group, rank);
      GradientReducer reducer(net.params(), comm, /*bucketCapBytes=*/8, overlap);
      ASSERT_EQ(reducer.numBuckets(), 3u);
      reducer.prepareForBackward();
      net.loss(torch::linspace(-1, 1 + rank, 20).reshape({5, 4})).backward();
      local[rank] = gradients(net.params());
      reducer.finishBackward();
      reduced[rank] = gradients(net.params());
    });
    for (size_t i = 0; i < local[0].size(); ++i) {
      const torch::Tensor mean = (local[0][i] + local[1][i] + local[2][i]) / 3.0;
      EXPECT_FALSE(torch::equal(local[0][i], local[1][i])) << "the ranks' own gradients should differ";
      for (int rank = 0; rank < kRanks; ++rank) {
        EXPECT_TRUE(torch::allclose(reduced[rank][i], mean, 1e-6, 1e-7)) << "param " << i << " rank " << rank;
        EXPECT_TRUE(torch::equal(reduced[rank][i], reduced[0][i])) << "ranks must agree bit for bit";
      }
    }
  }
}

TEST(GradientReducer, AfterAReplayedBackwardItAveragesWhatTheBucketsHold) {
  // A replayed CUDA graph writes the buckets but runs no hook on the host: a step that only replays looks, to the
  // reducer, like a step without gradients until gradientsArrivedByReplay() says otherwise.
  constexpr int kRanks = 2;
  ThreadGroup group(kRanks);
  std::vector<std::vector<torch::Tensor>> first(kRanks), replayed(kRanks);
  std::vector<std::string> withoutReplayMark(kRanks);
  spawnRanks(kRanks, [&](int rank) {
    Chain net;
    ThreadCommunicator comm(group, rank);
    GradientReducer reducer(net.params(), comm, /*bucketCapBytes=*/8, /*overlap=*/false);
    reducer.prepareForBackward();
    net.loss(torch::linspace(-1, 1 + rank, 20).reshape({5, 4})).backward();
    reducer.finishBackward();
    first[rank] = gradients(net.params());
    for (auto& p : net.params()) p.mutable_grad().zero_();
    // The next step: no backward runs; the buckets still hold the last allreduce's sums, and a replay's average of
    // them is their sum again (2 × the last average, exactly: the scalings are by powers of two).
    reducer.prepareForBackward();
    try {
      reducer.finishBackward();
    } catch (const Error& e) {
      withoutReplayMark[rank] = e.what();
    }
    reducer.gradientsArrivedByReplay();
    reducer.finishBackward();
    replayed[rank] = gradients(net.params());
  });
  for (int rank = 0; rank < kRanks; ++rank) {
    EXPECT_NE(withoutReplayMark[rank].find("received no gradient"), std::string::npos) << withoutReplayMark[rank];
    for (size_t i = 0; i < first[rank].size(); ++i) {
      EXPECT_TRUE(torch::equal(replayed[rank][i], first[rank][i] * kRanks)) << "rank " << rank << " param " << i;
    }
  }
}

TEST(GradientReducer, LaunchesBucketsInIndexOrderWhateverOrderGradientsArriveIn) {
  // Parameter 1 (5 elements) forms bucket 0 and parameter 0 (2 elements) bucket 1. Rank 1 builds its loss so
  // that autograd produces parameter 0's gradient first, rank 0 the other way round.
  constexpr int kRanks = 2;
  ThreadGroup group(kRanks);
  std::vector<std::vector<size_t>> arrival(kRanks);
  spawnRanks(kRanks, [&](int rank) {
    torch::Tensor a = param({2}, 1.0), b = param({5}, 2.0);
    ThreadCommunicator comm(group, rank);
    GradientReducer reducer({a, b}, comm, /*bucketCapBytes=*/1, /*overlap=*/true);
    ASSERT_EQ(reducer.bucketParams(0), std::vector<size_t>{1});
    // Registered after the reducer's hooks: records the order in which gradients arrive.
    a.register_hook([&arrival, rank](const torch::Tensor&) { arrival[rank].push_back(0); });
    b.register_hook([&arrival, rank](const torch::Tensor&) { arrival[rank].push_back(1); });
    reducer.prepareForBackward();
    // Autograd runs the most recently built branch first.
    const bool aFirst = rank == 1;
    const torch::Tensor early = aFirst ? (b * 3).sum() : (a * a).sum();
    const torch::Tensor late = aFirst ? (a * a).sum() : (b * 3).sum();
    (early + late).backward();
    reducer.finishBackward();
  });
  ASSERT_NE(arrival[0], arrival[1]) << "the ranks should produce their gradients in different orders";
  for (int rank = 0; rank < kRanks; ++rank) {
    auto calls = group.calls(rank);
    ASSERT_EQ(calls.size(), 2u);
    EXPECT_EQ(calls[0].numel, 5) << "bucket 0 (parameter 1) first on rank " << rank;
    EXPECT_EQ(calls[1].numel, 2);
  }
}

TEST(GradientReducer, OverlapStartsBucketsInsideBackwardAndNoOverlapAfterIt) {
  // Three buckets: w1's, b0's, w0's (backward's order). With overlap, the first two start inside backward;
  // the last, completed by backward's last gradient, starts in finishBackward with nothing left to overlap.
  for (bool overlap : {true, false}) {
    constexpr int kRanks = 2;
    ThreadGroup group(kRanks);
    std::vector<double> backwardReturned(kRanks);
    spawnRanks(kRanks, [&](int rank) {
      Chain net;
      ThreadCommunicator comm(group, rank);
      GradientReducer reducer(net.params(), comm, /*bucketCapBytes=*/8, overlap);
      reducer.prepareForBackward();
      net.loss(torch::ones({5, 4})).backward();
      backwardReturned[rank] = now();
      reducer.finishBackward();
    });
    for (int rank = 0; rank < kRanks; ++rank) {
      auto calls = group.calls(rank);
      ASSERT_EQ(calls.size(), 3u);
      for (size_t b = 0; b < calls.size(); ++b) {
        if (overlap && b < 2) {
          EXPECT_LT(calls[b].startedAt, backwardReturned[rank]) << "bucket " << b << " should start during backward";
        } else {
          EXPECT_GE(calls[b].startedAt, backwardReturned[rank]) << "bucket " << b << " should start after backward";
        }
      }
    }
  }
}

TEST(GradientReducer, AnUnusedParameterIsAnErrorOnEveryRankBeforeAnyMismatchedCollective) {
  constexpr int kRanks = 2;
  ThreadGroup group(kRanks);
  std::atomic<int> errors{0};
  spawnRanks(kRanks, [&](int rank) {
    Chain net;
    torch::Tensor unused = param({7}, 0.0);
    ThreadCommunicator comm(group, rank);
    GradientReducer reducer({net.w0, net.b0, unused, net.w1}, comm, /*bucketCapBytes=*/1 << 20, /*overlap=*/true);
    reducer.prepareForBackward();
    net.loss(torch::ones({5, 4})).backward();
    try {
      reducer.finishBackward();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("parameter 2 received no gradient"), std::string::npos) << e.what();
      ++errors;
    }
  });
  EXPECT_EQ(errors, kRanks);
  EXPECT_TRUE(group.calls(0).empty()) << "the one bucket holds the unused parameter and must never start";
}

TEST(GradientReducer, BroadcastModuleStateGivesEveryRankRank0sParametersAndBuffers) {
  constexpr int kRanks = 3;
  ThreadGroup group(kRanks);
  std::vector<torch::Tensor> weights(kRanks), means(kRanks), batches(kRanks);
  // An int64 counter beyond float32's 24-bit mantissa: exact only when it does not travel as a float.
  constexpr int64_t kBatchesTracked = (int64_t{1} << 40) + 1;
  spawnRanks(kRanks, [&](int rank) {
    torch::nn::BatchNorm1d net(4);
    {
      torch::NoGradGuard noGrad;
      net->weight.fill_(rank + 1.0);
      net->running_mean.fill_(rank * 10.0);
      net->num_batches_tracked.fill_(rank == 0 ? kBatchesTracked : rank);
    }
    ThreadCommunicator comm(group, rank);
    broadcastModuleState(*net, comm);
    weights[rank] = net->weight.detach().clone();
    means[rank] = net->running_mean.clone();
    batches[rank] = net->num_batches_tracked.clone();
  });
  for (int rank = 0; rank < kRanks; ++rank) {
    EXPECT_TRUE(torch::equal(weights[rank], torch::ones({4}))) << rank;
    EXPECT_TRUE(torch::equal(means[rank], torch::zeros({4}))) << rank;
    EXPECT_EQ(batches[rank].item<int64_t>(), kBatchesTracked) << rank;
  }
}

}  // namespace
}  // namespace ddprun::worker
