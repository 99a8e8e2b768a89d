// The failure summary: the root cause, and how hung ranks are ordered.
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "common/error_file.hpp"
#include "launcher/history/failure_summary.hpp"
#include "support/child_process.hpp"

namespace ddprun::launcher {
namespace fs = std::filesystem;
namespace {

TEST(FailureSummary, NamesTheEarliestFailureAsRootCause) {
  const std::string dir = test::makeTempDir("summary");
  writeErrorFile(dir + "/1.json", {"InjectedFault: boom", "", 1700000000});
  writeErrorFile(dir + "/0.json", {"RuntimeError: Connection closed by peer", "", 1700000000});
  // Rank 1's file was written first (the order comes from the files' modification times).
  fs::last_write_time(dir + "/0.json", fs::last_write_time(dir + "/1.json") + std::chrono::milliseconds(20));
  WorkerExit exited{1, 0, std::chrono::system_clock::now()};
  WorkerExit killed{0, 9, std::chrono::system_clock::now()};
  std::vector<WorkerFailure> failures{describeFailure(0, 0, 100, exited, dir + "/0.json"),
                                      describeFailure(1, 1, 101, exited, dir + "/1.json"),
                                      describeFailure(2, 2, 102, killed, dir + "/absent.json")};
  EXPECT_EQ(rootCauseIndex({failures[0], failures[1]}), 1u);
  EXPECT_EQ(failures[2].message, "Signal 9 (SIGKILL) received by PID 102");
  std::string text = formatFailureSummary("worker", "default", {failures[0], failures[1]}, "host1");
  const auto root = text.find("Root Cause");
  ASSERT_NE(root, std::string::npos) << text;
  EXPECT_NE(text.find("rank      : 1 (local_rank: 1)", root), std::string::npos) << text;
  EXPECT_NE(text.find("message   : InjectedFault: boom", root), std::string::npos) << text;
  EXPECT_NE(text.find("exitcode  : 1 (pid: 101)", root), std::string::npos) << text;
  EXPECT_LT(text.find("Connection closed by peer"), root) << text;
  EXPECT_NE(formatFailureSummary("w", "default", {failures[2]}, "h").find("exitcode  : -9 (pid: 102) SIGKILL"),
            std::string::npos);
  fs::remove_all(dir);
}

TEST(FailureSummary, AHungRankThatWaitsOnItsPeersIsNeverTheRootCauseOverOneThatDoesNot) {
  // In lockstep DDP both ranks of a hang stop at the same step and are flagged on the same tick; rank 0 (the
  // earlier entry) waits in the allreduce, rank 1 is stuck in its own code.
  const auto now = std::chrono::system_clock::now();
  WorkerFailure waiting;
  waiting.globalRank = 0;
  waiting.order = now;
  waiting.waitsOnPeers = true;
  WorkerFailure stuck;
  stuck.globalRank = 1;
  stuck.order = now + std::chrono::milliseconds(1);
  EXPECT_EQ(rootCauseIndex({waiting, stuck}), 1u);
  EXPECT_EQ(rootCauseIndex({stuck, waiting}), 0u);
  stuck.waitsOnPeers = true;  // every rank waits: time decides again
  EXPECT_EQ(rootCauseIndex({waiting, stuck}), 0u);
}

}  // namespace
}  // namespace ddprun::launcher
