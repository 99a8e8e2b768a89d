// The failure summary: the root cause, and how hung ranks are ordered.
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

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

TEST(FailureSummary, ARankWithoutAnErrorFileIsDescribedByTheEndOfItsStderr) {
  const std::string dir = test::makeTempDir("tail");
  WorkerExit exited{1, 0, std::chrono::system_clock::now()};
  const std::string tail =
      "Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n"
      "    batch['labels']\nKeyError: 'labels'\n";
  const WorkerFailure f = describeFailure(1, 1, 101, exited, dir + "/absent.json", tail);
  EXPECT_TRUE(f.fromStderr);
  EXPECT_EQ(f.message, "KeyError: 'labels'");
  const std::string text = formatFailureSummary("train.py", "default", {f}, "host1");
  EXPECT_NE(text.find("message   : KeyError: 'labels'"), std::string::npos) << text;
  EXPECT_NE(text.find("traceback : Traceback (most recent call last):\n    File \"train.py\", line 3"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("To enable traceback"), std::string::npos) << text;
  // A signal keeps its own message; the tail is the traceback field.
  const WorkerFailure crashed = describeFailure(1, 1, 102, {0, 11, exited.when}, dir + "/absent.json",
                                                "Fatal Python error: Segmentation fault\n");
  EXPECT_EQ(crashed.message, "Signal 11 (SIGSEGV) received by PID 102");
  EXPECT_EQ(crashed.traceback, "Fatal Python error: Segmentation fault\n");
  // torchelastic's contract: an error file, when written, wins.
  writeErrorFile(dir + "/1.json", {"ValueError: from the file", "file trace", 1700000000});
  const WorkerFailure recorded = describeFailure(1, 1, 103, exited, dir + "/1.json", tail);
  EXPECT_FALSE(recorded.fromStderr);
  EXPECT_EQ(recorded.message, "ValueError: from the file");
  EXPECT_EQ(recorded.traceback, "file trace");
  fs::remove_all(dir);
}

TEST(FailureSummary, WhatAnErrorFileHoldsIsPrintedBoundedAndItsTimeSanely) {
  // A traceback of 40,000 lines, a message of 100 KB and a timestamp past any calendar (2^63 - 1), all within the
  // file bound: the summary prints the traceback's end, the message's start and the exit's time.
  const std::string dir = test::makeTempDir("bounded");
  std::string trace = "Traceback (most recent call last):\n";
  for (int i = 0; trace.size() < 800'000; ++i) trace += "  File \"x.py\", line " + std::to_string(i) + "\n";
  trace += "RecursionError: deep\n";
  nlohmann::json file = {{"message",
                          {{"message", "E: " + std::string(100'000, 'm')},
                           {"extraInfo", {{"py_callstack", trace}, {"timestamp", "9223372036854775807"}}}}}};
  std::ofstream(dir + "/1.json") << file.dump();
  const auto now = std::chrono::system_clock::now();
  const WorkerFailure f = describeFailure(1, 1, 101, {1, 0, now}, dir + "/1.json");
  ASSERT_TRUE(f.fromErrorFile) << f.message;
  const std::string text = formatFailureSummary("x.py", "default", {f}, "host1");
  EXPECT_LT(text.size(), 48u * 1024) << "the summary printed " << text.size() << " bytes";
  EXPECT_NE(text.find("RecursionError: deep"), std::string::npos);
  EXPECT_NE(text.find("earlier lines not shown; the whole traceback is in " + dir + "/1.json"), std::string::npos);
  EXPECT_NE(text.find("more bytes]"), std::string::npos);
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  localtime_r(&t, &tm);
  char year[8];
  std::strftime(year, sizeof year, "%Y", &tm);
  EXPECT_NE(text.find(std::string("time      : ") + year + "-"), std::string::npos) << text.substr(0, 400);
  fs::remove_all(dir);
}

TEST(FailureSummary, KeepLastLinesKeepsTheEndWithinBothBounds) {
  EXPECT_EQ(keepLastLines("a\nb\n", 5, 100), "a\nb\n");
  EXPECT_EQ(keepLastLines("a\nb\nc\n", 2, 100), "[… 1 earlier line not shown]\nb\nc\n");
  EXPECT_EQ(keepLastLines("aaaa\nbb\n", 5, 4, " (x)"), "[… 1 earlier line not shown (x)]\nbb\n");
  EXPECT_EQ(keepLastLines(std::string(10, 'z'), 5, 4), "[… 0 earlier lines not shown]\nzzzz");
}

}  // namespace
}  // namespace ddprun::launcher
