// ddprun's output path without worker processes: the segmenter (prefixes, '\r' progress bars, partial and
// overlong lines), the non-blocking console writer (line ownership, a reader that stops reading, drop
// notices), the log layout and the console prefix template.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "launcher/log_layout.hpp"
#include "launcher/process/console_writer.hpp"
#include "launcher/process/output_segmenter.hpp"
#include "launcher/process/stderr_tail.hpp"
#include "launcher/worker_env.hpp"
#include "support/child_process.hpp"

namespace ddprun::launcher {
namespace fs = std::filesystem;
using namespace std::chrono_literals;
namespace {

TEST(OutputSegmenter, PrefixesCompleteLinesAndKeepsAPartialOneForLater) {
  OutputSegmenter s("[rank0]:");
  auto piece = s.feed("one\ntwo\nthr");
  EXPECT_EQ(piece.text, "[rank0]:one\n[rank0]:two\n");
  EXPECT_FALSE(piece.leavesLineOpen);
  EXPECT_TRUE(s.hasPartial());
  piece = s.flushPartial();
  EXPECT_EQ(piece.text, "[rank0]:thr");
  EXPECT_TRUE(piece.leavesLineOpen);
  piece = s.feed("ee\n");
  EXPECT_EQ(piece.text, "ee\n");  // the rest of a line already on screen: no second prefix
  EXPECT_TRUE(piece.continuesLine);
}

TEST(OutputSegmenter, ACarriageReturnStartsANewPrefixedSegmentSoProgressBarsMove) {
  // What tqdm writes: "\r" + bar, redrawn, then "\n" at the end.
  OutputSegmenter s("[rank1]:");
  EXPECT_TRUE(s.feed("\r 10%|#  |").empty());  // a '\r' at the start of a line moves nothing
  auto piece = s.flushPartial();
  EXPECT_EQ(piece.text, "[rank1]: 10%|#  |");
  piece = s.feed("\r 20%|## |");
  EXPECT_EQ(piece.text, "\r");  // back to the start of the line; the next redraw brings its own prefix
  EXPECT_TRUE(piece.continuesLine);
  EXPECT_TRUE(piece.leavesLineOpen);
  EXPECT_EQ(s.flushPartial().text, "[rank1]: 20%|## |");
  piece = s.feed("\r100%|###|\n");
  EXPECT_EQ(piece.text, "\r[rank1]:100%|###|\n");
  EXPECT_FALSE(piece.leavesLineOpen);
}

TEST(OutputSegmenter, CrLfEndsALineWithoutAnEmptyPrefixedLine) {
  OutputSegmenter s("[p]:");
  EXPECT_EQ(s.feed("dos\r\nnext\r\n").text, "[p]:dos\r\n[p]:next\r\n");
}

TEST(OutputSegmenter, CutsOverlongLinesIntoPrefixedPiecesAndStaysBounded) {
  OutputSegmenter s("[p]:", 8);
  auto piece = s.feed(std::string(20, 'x'));
  EXPECT_EQ(piece.text, "[p]:xxxxxxxx [ddprun: line continues]\n[p]:xxxxxxxx [ddprun: line continues]\n");
  EXPECT_TRUE(s.hasPartial());
  EXPECT_EQ(s.finish().text, "[p]:xxxx\n");
  // A long stream without newlines never holds more than one piece.
  OutputSegmenter big("[p]:");
  size_t shown = 0;
  for (int i = 0; i < 300; ++i) shown += big.feed(std::string(10000, 'y')).text.size();
  EXPECT_GE(shown, 300u * 10000 - OutputSegmenter::kDefaultMaxLineBytes);
}

TEST(OutputSegmenter, ALineOfExactlyTheBoundIsWhole) {
  OutputSegmenter s("[p]:", 8);
  EXPECT_EQ(s.feed("12345678\n").text, "[p]:12345678\n");
  EXPECT_EQ(s.feed("123456789\n").text, "[p]:12345678 [ddprun: line continues]\n[p]:9\n");
}

TEST(OutputSegmenter, FinishEndsALineLeftOpen) {
  OutputSegmenter s("[p]:");
  s.feed("prompt> ");
  EXPECT_EQ(s.flushPartial().text, "[p]:prompt> ");
  auto piece = s.finish();
  EXPECT_EQ(piece.text, "\n");
  EXPECT_TRUE(piece.continuesLine);
  EXPECT_TRUE(s.finish().empty());
}

/// A pseudo-terminal: what ddprun's console is when run from an interactive shell; the test reads the master side.
struct Terminal {
  int master = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  int fd = -1;  ///< the terminal itself (the pty's slave side)
  Terminal() {
    EXPECT_GE(master, 0);
    EXPECT_EQ(::grantpt(master), 0);
    EXPECT_EQ(::unlockpt(master), 0);
    fd = ::open(::ptsname(master), O_RDWR | O_NOCTTY | O_CLOEXEC);
    EXPECT_GE(fd, 0);
  }
  ~Terminal() {
    ::close(fd);
    ::close(master);
  }
};

/// A pipe whose read end the test drains (or not).
struct Pipe {
  int fds[2];
  Pipe() { EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0); }
  ~Pipe() {
    ::close(fds[0]);
    ::close(fds[1]);
  }
  std::string drain() {
    ::fcntl(fds[0], F_SETFL, O_NONBLOCK);
    std::string out;
    char buffer[65536];
    ssize_t n;
    while ((n = ::read(fds[0], buffer, sizeof buffer)) > 0) out.append(buffer, static_cast<size_t>(n));
    return out;
  }
};

TEST(StderrTail, KeepsTheLastTracebackBlockElseTheLastLines) {
  StderrTail tail;
  EXPECT_EQ(tail.text(), "");
  tail.feed("loading\nTraceback (most recent call last):\n  File \"a.py\", line 1\nValueError: first\n");
  tail.feed("retrying\nTraceback (most recent call last):\n  File \"a.py\", line 9, in f\n");
  tail.feed("    g()\nKeyError: 'x'");  // its last line not ended yet
  EXPECT_EQ(tail.text(), "Traceback (most recent call last):\n  File \"a.py\", line 9, in f\n    g()\nKeyError: 'x'\n");
  EXPECT_EQ(lastErrorLine(tail.text()), "KeyError: 'x'");
  StderrTail lines;
  for (int i = 0; i < 100; ++i) lines.feed("line " + std::to_string(i) + "\n");
  lines.feed("[2024-01-01 00:00:00.000] [worker rank 1] [error] DataError: no data\nbye\n");
  const std::string text = lines.text();
  EXPECT_EQ(text.rfind("[… 62 earlier lines not kept]\nline 62\n", 0), 0u) << text;
  EXPECT_EQ(lastErrorLine(text), "[2024-01-01 00:00:00.000] [worker rank 1] [error] DataError: no data");
}

TEST(StderrTail, StaysBoundedAndAProgressBarKeepsOnlyItsLastDraw) {
  StderrTail tail;
  tail.feed(std::string(1 << 20, 'x') + "\n");  // 1 MiB in one line: its start is kept
  tail.feed(" 10%|#   |\r 20%|##  |\r100%|####|\n");
  const std::string text = tail.text();
  EXPECT_LE(text.size(), StderrTail::kMaxBytes + 64);
  EXPECT_NE(text.find("100%|####|\n"), std::string::npos) << text.substr(text.size() - 40);
  EXPECT_EQ(text.find("20%"), std::string::npos);
  StderrTail crlf;
  crlf.feed("windows line\r\nnext\n");
  EXPECT_EQ(crlf.text(), "windows line\nnext\n");
  EXPECT_EQ(lastErrorLine("just text\n\n"), "just text");
}

TEST(ConsoleWriter, AnotherSourceEndsAnOpenLineAndItsOwnerGetsItsPrefixBack) {
  Pipe pipe;
  ConsoleWriter console(pipe.fds[1], 1 << 20);
  console.write(0, "[rank0]: 10%", /*leavesLineOpen=*/true);
  console.write(1, "[rank1]:hello\n", false);
  console.write(0, " done\n", false, /*continuesLine=*/true, "[rank0]:");
  console.write(ConsoleWriter::kSelf, "[ddprun] note\n", false);
  ASSERT_TRUE(console.flush(5s));
  EXPECT_EQ(pipe.drain(), "[rank0]: 10%\n[rank1]:hello\n[rank0]: done\n[ddprun] note\n");
}

TEST(ConsoleWriter, AFullQueueAsksProducersToPauseAndNothingIsDropped) {
  Pipe pipe;  // nobody reads until the end: the pipe's 64 KiB fill up and the writer thread blocks
  ConsoleWriter console(pipe.fds[1], 256 * 1024);
  const std::string line(1000, 'x');
  const auto start = std::chrono::steady_clock::now();
  int written = 0;
  while (console.write(3, line + "\n", false)) ++written;  // a relay stops at the first "full"
  ++written;                                               // the write that said "full" was queued too
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s) << "write() waited for the reader";
  EXPECT_LT(written, 400) << "the capacity (256 KiB) and the pipe (64 KiB) bound what is queued";
  EXPECT_FALSE(console.hasRoom());
  EXPECT_FALSE(console.flush(100ms));  // the reader is stuck, and flush says so instead of hanging
  EXPECT_FALSE(console.drain(200ms)) << "no progress for 200 ms: a stuck reader";
  // The reader comes back: every line arrives, and there is room again.
  std::string got;
  for (int i = 0; i < 1000 && got.size() < static_cast<size_t>(written) * (line.size() + 1); ++i) {
    got += pipe.drain();
    console.flush(10ms);
  }
  got += pipe.drain();
  EXPECT_EQ(got.size(), static_cast<size_t>(written) * (line.size() + 1));
  EXPECT_EQ(got.find("dropped"), std::string::npos);
  EXPECT_TRUE(console.hasRoom());
  EXPECT_EQ(console.written(), got.size());
}

TEST(ConsoleWriter, WhatAStuckReaderDidNotTakeCanBeTakenBack) {
  Pipe pipe;
  ConsoleWriter console(pipe.fds[1], 1 << 20);
  const std::string chunk(32 * 1024, 'y');
  for (int i = 0; i < 8; ++i) console.write(0, chunk, true);  // 256 KiB: more than the pipe holds
  EXPECT_FALSE(console.flush(100ms));
  const std::string left = console.takeUnwritten();
  EXPECT_GT(left.size(), 0u);
  const std::string shown = pipe.drain();
  console.flush(1s);
  const std::string rest = pipe.drain();
  EXPECT_EQ(shown.size() + rest.size() + left.size(), 8 * chunk.size()) << "every byte either shown or taken back";
}

TEST(ConsoleWriter, ALineWrittenAfterTakingBackFromAnIdleWriterIsShown) {
  // ddprun takes back what its consoles did not show and then logs where it went: that line must appear.
  Pipe pipe;
  ConsoleWriter console(pipe.fds[1], 1 << 20);
  EXPECT_EQ(console.takeUnwritten(), "");
  console.write(ConsoleWriter::kSelf, "[ddprun] saved\n", false);
  ASSERT_TRUE(console.flush(5s));
  EXPECT_EQ(pipe.drain(), "[ddprun] saved\n");
}

TEST(ConsoleWriter, AReaderThatClosesThePipeLeavesNothingQueued) {
  // `ddprun ... | head`: once the reader is gone (EPIPE; ddprun ignores SIGPIPE) nobody can read the rest, so the
  // writer drops it instead of keeping producers paused or flush waiting.
  ::signal(SIGPIPE, SIG_IGN);
  Pipe pipe;
  ConsoleWriter console(pipe.fds[1], 1 << 20);
  console.write(0, "[rank0]:shown\n", false);
  ASSERT_TRUE(console.flush(5s));
  EXPECT_EQ(pipe.drain(), "[rank0]:shown\n");
  ::close(pipe.fds[0]);
  pipe.fds[0] = -1;
  for (int i = 0; i < 100; ++i) console.write(0, std::string(1000, 'x') + "\n", false);
  EXPECT_TRUE(console.flush(5s));
  EXPECT_EQ(console.queued(), 0u);
  EXPECT_TRUE(console.hasRoom());
  EXPECT_EQ(console.written(), std::string("[rank0]:shown\n").size());
}

/// This process's threads now (/proc/self/task), to see whether a writer started one.
size_t threadCount() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator("/proc/self/task")) ++n;
  return n;
}

TEST(ConsoleWriter, TheThreadStartsAtTheFirstWriteAndWritesToATerminal) {
  // A ddprun that prints nothing has no writer thread; the first write starts the one that writes everything.
  Terminal terminal;
  ASSERT_GE(terminal.fd, 0);
  const size_t before = threadCount();
  {
    ConsoleWriter console(terminal.fd, 1 << 20, /*terminal=*/true);
    ASSERT_TRUE(console.flush(1s));
    EXPECT_FALSE(console.threadStarted()) << "no thread before the first write";
    EXPECT_EQ(threadCount(), before);
    console.write(ConsoleWriter::kSelf, "[ddprun] hello\n", false);
    EXPECT_TRUE(console.threadStarted());
    EXPECT_EQ(threadCount(), before + 1);
    ASSERT_TRUE(console.flush(5s));
  }
  char buffer[256];
  const ssize_t n = ::read(terminal.master, buffer, sizeof buffer);
  ASSERT_GT(n, 0);
  EXPECT_NE(std::string(buffer, static_cast<size_t>(n)).find("[ddprun] hello"), std::string::npos);
}

TEST(ConsoleWriter, OnATerminalEachSourcesOpenLineIsRedrawnInPlaceBelowTheCompleteLines) {
  Pipe pipe;  // what a terminal would receive
  ConsoleWriter console(pipe.fds[1], 1 << 20, /*terminal=*/true);
  console.setColumns(20);
  console.write(0, "[rank0]: 10%", true);
  console.write(1, "[rank1]: 20%", true);
  console.write(0, "\r", true, true, "[rank0]:");
  console.write(0, "[rank0]: 30%", true);
  console.write(ConsoleWriter::kSelf, "[ddprun] a complete line\n", false);
  console.write(1, "\r", true, true, "[rank1]:");
  console.write(1, "[rank1]:100% and much more than twenty columns", true);
  console.write(1, "\n", false, true, "[rank1]:");
  ASSERT_TRUE(console.flush(5s));
  const std::string up = "\x1b[1A", clear = "\x1b[J";
  EXPECT_EQ(pipe.drain(),
            // rank 0's bar, then rank 1's below it
            "[rank0]: 10%" + std::string("\r") + clear + "[rank0]: 10%\n[rank1]: 20%" +
                // rank 0 redraws: the region is redrawn, each bar on its own line, no empty prefixed line
                "\r" + up + clear + "[rank0]: 10%\n[rank1]: 20%" + "\r" + up + clear + "[rank0]: 30%\n[rank1]: 20%" +
                // a complete line scrolls above the region
                "\r" + up + clear + "[ddprun] a complete line\n[rank0]: 30%\n[rank1]: 20%" + "\r" + up + clear +
                "[rank0]: 30%\n[rank1]: 20%" +
                // a bar wider than the terminal is cut to fit (19 of 20 columns: the cursor stays on the line)
                "\r" + up + clear + "[rank0]: 30%\n[rank1]:100% and mu" +
                // rank 1's bar ends: it scrolls up with its last text in full, rank 0's stays below
                "\r" + up + clear + "[rank1]:100% and much more than twenty columns\n[rank0]: 30%");
}

TEST(LogLayout, FollowsTorchrunsLayoutAndRoutesStreams) {
  LogOptions options;
  options.redirects = {{-1, 1}};
  options.tee = {{0, 2}};
  auto rank0 = workerLogPaths("/logs/job_abc", 3, 0, options);
  EXPECT_EQ(rank0.dir, "/logs/job_abc/attempt_3/0");
  EXPECT_EQ(rank0.errorFile, "/logs/job_abc/attempt_3/0/error.json");
  EXPECT_EQ(rank0.stdoutFile, "/logs/job_abc/attempt_3/0/stdout.log");
  EXPECT_EQ(rank0.stderrFile, "/logs/job_abc/attempt_3/0/stderr.log");
  EXPECT_FALSE(rank0.stdoutToConsole);  // redirected: file only
  EXPECT_TRUE(rank0.stderrToConsole);   // teed: file and console
  auto rank1 = workerLogPaths("/logs/job_abc", 3, 1, options);
  EXPECT_TRUE(rank1.stderrFile.empty());
  options.localRanksFilter = {0};
  EXPECT_FALSE(workerLogPaths("/r", 0, 1, options).stderrToConsole);
  EXPECT_TRUE(writesLogFiles(options));
  EXPECT_FALSE(writesLogFiles(LogOptions{{{-1, 0}}, {}, {}}));
}

TEST(LogLayout, RunsSharingALogDirAndRunIdNeverShareADirectory) {
  const std::string base = test::makeTempDir("logbase");
  RunLogDir a(base, "job"), b(base, "job");
  EXPECT_NE(a.path(), b.path());
  EXPECT_EQ(fs::path(a.path()).parent_path(), fs::path(base));
  EXPECT_EQ(fs::path(a.path()).filename().string().rfind("job_", 0), 0u);
  // A failed run keeps its error files and leaves no empty directory behind.
  const auto paths = workerLogPaths(a.path(), 0, 0, {});
  RunLogDir::prepare(paths);
  RunLogDir::prepare(workerLogPaths(a.path(), 0, 1, {}));
  std::ofstream(paths.errorFile) << "{}";
  a.finish(/*succeeded=*/false, false);
  EXPECT_TRUE(fs::exists(paths.errorFile));
  EXPECT_FALSE(fs::exists(a.path() + "/attempt_0/1"));
  b.finish(true, false);
  EXPECT_FALSE(fs::exists(b.path()));  // nothing in it: pruned
  EXPECT_TRUE(fs::exists(base));       // the user's --log-dir stays
  fs::remove_all(base);
}

TEST(LogLayout, ATemporaryDirGoesAfterSuccessOnlyWhenNothingWasRedirectedIntoIt) {
  RunLogDir quiet("", "job");
  const fs::path quietBase = fs::path(quiet.path()).parent_path();
  EXPECT_TRUE(quiet.temporary());
  quiet.finish(true, /*keepFiles=*/false);
  EXPECT_FALSE(fs::exists(quietBase));
  RunLogDir kept("", "job");
  const auto paths = workerLogPaths(kept.path(), 0, 0, {});
  RunLogDir::prepare(paths);
  std::ofstream(paths.dir + "/stdout.log") << "output";
  kept.finish(true, /*keepFiles=*/true);
  EXPECT_TRUE(fs::exists(paths.dir + "/stdout.log"));
  fs::remove_all(fs::path(kept.path()).parent_path());
}

TEST(LinePrefix, FillsTorchrunsTemplate) {
  EXPECT_EQ(linePrefix(kDefaultLinePrefix, "default", 3, 1), "[rank3]:");
  EXPECT_EQ(linePrefix("[${role_name}${local_rank}]:", "trainer", 5, 1), "[trainer1]:");
  EXPECT_EQ(linePrefix("$rank|$local_rank $$ ${unknown} ${rank", "r", 7, 2), "7|2 $ ${unknown} ${rank");
}

}  // namespace
}  // namespace ddprun::launcher
