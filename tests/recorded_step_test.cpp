// RecordedStep's sequencing with a recorder that re-runs the work and parts that log what they are given: the
// warm-ups, the recording and its replays, the static tensors a recording reads, and a reset. The whole step under
// it is trainer_test's (bit-equal to eager training).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "support/rerun_recorder.hpp"
#include "worker/recorded_step.hpp"

namespace ddprun::worker {
namespace {

using test::RerunRecorder;

/// 10 "images" whose pixels all hold their own index, and labels 100 + index.
Split numberedSplit() {
  return {torch::arange(10, torch::kFloat32).reshape({10, 1, 1, 1}).expand({10, 1, 2, 2}).contiguous(),
          torch::arange(100, 110, torch::kInt64)};
}

struct Log {
  std::vector<std::string> calls;
  std::vector<const void*> imageAddresses;
  std::vector<std::vector<int64_t>> labels;
};

RecordedStep::Parts loggingParts(Log& log) {
  RecordedStep::Parts parts;
  parts.backward = [&log](const torch::Tensor& images, const torch::Tensor& labels) {
    log.calls.push_back("backward");
    log.imageAddresses.push_back(images.data_ptr());
    log.labels.emplace_back(labels.data_ptr<int64_t>(), labels.data_ptr<int64_t>() + labels.numel());
    EXPECT_TRUE(torch::equal(images.select(1, 0).select(1, 0).select(1, 0).to(torch::kInt64), labels - 100));
  };
  parts.awaitAllreduces = [&log](bool replayed) {
    log.calls.push_back(replayed ? "await replayed" : "await");
    return 0.25;  // the seconds it waited
  };
  parts.update = [&log] { log.calls.push_back("update"); };
  return parts;
}

TEST(RecordedStep, WarmsUpThenRecordsOnceAndReplaysWithTheAllreduceBetween) {
  const Split train = numberedSplit();
  RerunRecorder::Counts counts;
  Log log;
  RecordedStep step(std::make_unique<RerunRecorder>(counts), train, 3, loggingParts(log));
  EXPECT_TRUE(step.takes(3));
  EXPECT_FALSE(step.takes(2));  // an epoch's smaller last batch stays eager
  const std::vector<std::vector<int64_t>> batches{{0, 1, 2}, {9, 8, 7}, {4, 4, 4}, {5, 3, 1}, {2, 6, 0}};
  for (const auto& batch : batches) EXPECT_EQ(step.run(torch::tensor(batch)), 0.25) << "the wait, as awaited";
  EXPECT_EQ(counts.warmUps, RecordedStep::kWarmUps);
  EXPECT_EQ(counts.records, 2);
  EXPECT_EQ(counts.replays, 4);  // two parts, in steps 4 and 5
  EXPECT_TRUE(step.recorded());
  const std::vector<std::string> warmUp{"backward", "await", "update"};
  const std::vector<std::string> replayed{"backward", "await replayed", "update"};
  std::vector<std::string> expected;
  for (int i = 0; i < 3; ++i) expected.insert(expected.end(), warmUp.begin(), warmUp.end());
  for (int i = 0; i < 2; ++i) expected.insert(expected.end(), replayed.begin(), replayed.end());
  EXPECT_EQ(log.calls, expected);
  // Every step saw its own batch, gathered into the same tensor each time (a replay reuses the addresses).
  for (size_t i = 0; i < batches.size(); ++i) {
    std::vector<int64_t> labels;
    for (int64_t index : batches[i]) labels.push_back(100 + index);
    EXPECT_EQ(log.labels[i], labels) << "step " << i;
    EXPECT_EQ(log.imageAddresses[i], log.imageAddresses[0]) << "step " << i;
  }
}

TEST(RecordedStep, AResetWarmsUpAndRecordsAgain) {
  const Split train = numberedSplit();
  RerunRecorder::Counts counts;
  Log log;
  RecordedStep step(std::make_unique<RerunRecorder>(counts), train, 2, loggingParts(log));
  for (int i = 0; i < 5; ++i) step.run(torch::tensor({i, i + 1}));
  step.reset();
  EXPECT_FALSE(step.recorded());
  EXPECT_EQ(counts.clears, 1);
  for (int i = 0; i < 5; ++i) step.run(torch::tensor({i, i + 1}));
  EXPECT_EQ(counts.warmUps, 2 * RecordedStep::kWarmUps);
  EXPECT_EQ(counts.records, 4);
  EXPECT_EQ(counts.replays, 2 * 2 * 2);
}

TEST(RecordedStep, ARecordingThatFailsIsThrownAndNothingIsReplayed) {
  const Split train = numberedSplit();
  RerunRecorder::Counts counts;
  Log log;
  auto recorder = std::make_unique<RerunRecorder>(counts);
  recorder->refuse = true;
  RecordedStep step(std::move(recorder), train, 2, loggingParts(log));
  for (int i = 0; i < RecordedStep::kWarmUps; ++i) step.run(torch::tensor({0, 1}));
  EXPECT_THROW(step.run(torch::tensor({0, 1})), Error);
  EXPECT_FALSE(step.recorded());
  EXPECT_EQ(counts.replays, 0);
}

TEST(RecordedStep, WithNothingToReduceTheWholeStepIsOneRecording) {
  const Split train = numberedSplit();
  RerunRecorder::Counts counts;
  Log log;
  RecordedStep::Parts parts = loggingParts(log);
  parts.awaitAllreduces = nullptr;
  RecordedStep step(std::make_unique<RerunRecorder>(counts), train, 2, std::move(parts));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(step.run(torch::tensor({i, i + 1})), 0.0);
  EXPECT_EQ(counts.records, 1);
  EXPECT_EQ(counts.replays, 2);  // steps 4 and 5
  std::vector<std::string> expected;
  for (int i = 0; i < 5; ++i) expected.insert(expected.end(), {"backward", "update"});
  EXPECT_EQ(log.calls, expected);
}

}  // namespace
}  // namespace ddprun::worker
