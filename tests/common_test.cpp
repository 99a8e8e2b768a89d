// Unit tests of common/: environment parsing, atomic files, torchelastic error files, progress files.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>

#include "common/append_file.hpp"
#include "common/atomic_file.hpp"
#include "common/cancel_flag.hpp"
#include "common/env.hpp"
#include "common/error.hpp"
#include "common/error_file.hpp"
#include "common/fd_passing.hpp"
#include "common/forkserver.hpp"
#include "common/log_text.hpp"
#include "common/progress_file.hpp"
#include "common/spare_rank.hpp"
#include "support/child_process.hpp"

namespace ddprun {
namespace fs = std::filesystem;

TEST(CancelFlag, SettingItRunsTheWakersOfLivingSubscriptionsOnly) {
  CancelFlag flag;
  int first = 0, second = 0;
  auto a = flag.onSet([&] { ++first; });
  {
    auto b = flag.onSet([&] { ++second; });
    EXPECT_FALSE(flag);
  }  // b is gone before the flag is set: its waker must never run
  flag = true;
  EXPECT_TRUE(flag);
  EXPECT_EQ(first, 1);
  EXPECT_EQ(second, 0);
  flag = false;  // cleared: a later set wakes again
  EXPECT_FALSE(flag);
  flag = true;
  EXPECT_EQ(first, 2);
  int late = 0;
  auto c = flag.onSet([&] { ++late; });  // subscribing to a set flag wakes at once
  EXPECT_EQ(late, 1);
}

TEST(LogText, AnotherNodesTextCannotForgeALogLineOrMoveTheCursor) {
  EXPECT_EQ(printable("node-7_123"), "node-7_123");
  EXPECT_EQ(printable("a\n[2026-12-06 10:00:00.000] [ddprun] [info] forged"),
            "a\\x0a[2026-12-06 10:00:00.000] [ddprun] [info] forged");
  EXPECT_EQ(printable("\x1b[2J\\"), "\\x1b[2J\\\\");
  EXPECT_EQ(printable("\xff"), "\\xff");
  EXPECT_EQ(printable(std::string(300, 'x'), 10), "xxxxxxxxxx...");
  EXPECT_TRUE(isPrintableName("127.0.0.1_42"));
  EXPECT_FALSE(isPrintableName(""));
  EXPECT_FALSE(isPrintableName("a\x1b"));
  EXPECT_FALSE(isPrintableName(std::string(300, 'x')));
}

TEST(Markers, ASpareOrForkserverMarkerWithoutDdprunsSocketIsDroppedNotObeyed) {
  // Inherited by accident (stdin a file or a terminal, the fd no socket): the program runs as a normal rank.
  ::setenv(kSpareRankEnv, "1", 1);
  EXPECT_EQ(isSeqPacketSocket(STDIN_FILENO), isSpareRank());
  ::setenv(kForkServerFdEnv, "0", 1);
  EXPECT_EQ(isSeqPacketSocket(0), forkServerAsked());
  if (!isSeqPacketSocket(0)) {
    EXPECT_EQ(std::getenv(kSpareRankEnv), nullptr) << "the stray marker is dropped";
    EXPECT_EQ(std::getenv(kForkServerFdEnv), nullptr);
  }
  // ddprun's own: a Unix SOCK_SEQPACKET socket under the number.
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET, 0, pair), 0);
  ::setenv(kForkServerFdEnv, std::to_string(pair[0]).c_str(), 1);
  EXPECT_TRUE(forkServerAsked());
  int stream[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, stream), 0);
  ::setenv(kForkServerFdEnv, std::to_string(stream[0]).c_str(), 1);
  EXPECT_FALSE(forkServerAsked()) << "a stream socket is not ddprun's";
  ::unsetenv(kForkServerFdEnv);
  for (int fd : {pair[0], pair[1], stream[0], stream[1]}) ::close(fd);
}

TEST(Env, ReadsIntegersAndNamesTheVariableOnError) {
  ::setenv("DDPRUN_TEST_INT", "42", 1);
  EXPECT_EQ(getEnvInt("DDPRUN_TEST_INT", 7), 42);
  ::unsetenv("DDPRUN_TEST_INT");
  EXPECT_EQ(getEnvInt("DDPRUN_TEST_INT", 7), 7);
  ::setenv("DDPRUN_TEST_INT", "4x", 1);
  try {
    getEnvInt("DDPRUN_TEST_INT", 0);
    FAIL() << "no error for a malformed number";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("DDPRUN_TEST_INT"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("4x"), std::string::npos) << e.what();
  }
  ::unsetenv("DDPRUN_TEST_INT");
}

TEST(Env, ReadsPythonBoolStrings) {
  ::setenv("DDPRUN_TEST_BOOL", "True", 1);
  EXPECT_TRUE(getEnvBool("DDPRUN_TEST_BOOL", false));
  ::setenv("DDPRUN_TEST_BOOL", "False", 1);
  EXPECT_FALSE(getEnvBool("DDPRUN_TEST_BOOL", true));
  ::setenv("DDPRUN_TEST_BOOL", "maybe", 1);
  EXPECT_THROW(getEnvBool("DDPRUN_TEST_BOOL", true), ConfigError);
  ::unsetenv("DDPRUN_TEST_BOOL");
  EXPECT_TRUE(getEnvBool("DDPRUN_TEST_BOOL", true));
}

/// A fresh directory made sticky and world-writable, as /tmp is.
std::string stickyWorldWritableDir(const std::string& tag) {
  const std::string dir = test::makeTempDir(tag);
  ::chmod(dir.c_str(), 01777);
  return dir;
}

TEST(AppendFile, AnotherUsersLinkInAStickyWorldWritableDirectoryIsNotFollowedWhateverTheSysctlSays) {
  // Root's private file, and a link to it made by another user (uid 65534) in a sticky world-writable directory:
  // with fs.protected_symlinks=0 the kernel follows it, and a worker running as root appended its metrics there.
  const std::string dir = stickyWorldWritableDir("append-link");
  const std::string secret = test::makeTempDir("append-secret") + "/secret";
  std::ofstream(secret) << "private\n";
  ::chmod(secret.c_str(), 0600);
  const std::string link = dir + "/metrics.jsonl";
  ASSERT_EQ(::symlink(secret.c_str(), link.c_str()), 0);
  const bool foreign = ::lchown(link.c_str(), 65534, 65534) == 0;
  if (!foreign) GTEST_SKIP() << "cannot give the link to another user (needs root; CI runs as root)";
  try {
    ::close(openForAppend(link));
    ADD_FAILURE() << "another user's link was followed";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(link + " is a symbolic link of uid 65534 in " + dir +
                                         ", a sticky world-writable directory: not followed"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(test::readFile(secret), "private\n");
  // A directory on the way that is another user's link is refused the same.
  const std::string viaDir = dir + "/runs";
  ASSERT_EQ(::symlink(fs::path(secret).parent_path().c_str(), viaDir.c_str()), 0);
  ASSERT_EQ(::lchown(viaDir.c_str(), 65534, 65534), 0);
  EXPECT_THROW(::close(openForAppend(viaDir + "/secret")), IoError);
  EXPECT_EQ(test::readFile(secret), "private\n");
  // The user's own link there, and any link in a directory only its owner writes, are followed.
  ASSERT_EQ(::lchown(link.c_str(), ::geteuid(), ::getegid()), 0);
  int fd = openForAppend(link);
  ASSERT_EQ(::write(fd, "ok\n", 3), 3);
  ::close(fd);
  EXPECT_EQ(test::readFile(secret), "private\nok\n");
  fs::remove_all(dir);
  fs::remove_all(fs::path(secret).parent_path());
}

TEST(AppendFile, AFifoNeverBlocksTheOpenAndIsRefusedWithOrWithoutAReaderARegularFileIsAppendedTo) {
  const std::string dir = stickyWorldWritableDir("append-fifo");
  const std::string fifo = dir + "/metrics.jsonl";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0666), 0);
  // No reader: a blocking open for writing would wait for ever.
  auto opened = std::async(std::launch::async, [&] {
    try {
      ::close(openForAppend(fifo));
      return std::string("opened");
    } catch (const IoError& e) {
      return std::string(e.what());
    }
  });
  if (opened.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    const int unblock = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);  // lets the blocked open return
    ADD_FAILURE() << "the open blocked on a FIFO with no reader";
    opened.wait();
    ::close(unblock);
  } else {
    EXPECT_NE(opened.get().find(fifo + ": cannot open it for appending: it is a FIFO"), std::string::npos);
  }
  // With a reader, the open itself succeeds; the file is still no regular file.
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  try {
    ::close(openForAppend(fifo));
    ADD_FAILURE() << "a FIFO was taken for a metrics file";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("it is a FIFO"), std::string::npos) << e.what();
  }
  ::close(reader);
  // A regular file is made, and appended to.
  const std::string plain = dir + "/plain.jsonl";
  for (const char* line : {"a\n", "b\n"}) {
    const int fd = openForAppend(plain);
    ASSERT_EQ(::write(fd, line, 2), 2);
    ::close(fd);
  }
  EXPECT_EQ(test::readFile(plain), "a\nb\n");
  EXPECT_NO_THROW(::close(openForAppend("/dev/null"))) << "a character device takes writes at once";
  fs::remove_all(dir);
}

TEST(AtomicFile, ReplacesContentAndLeavesNoTempFile) {
  const std::string dir = test::makeTempDir("atomic");
  const std::string path = dir + "/file.txt";
  writeFileAtomically(path, "first");
  writeFileAtomically(path, "second");
  EXPECT_EQ(test::readFile(path), "second");
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++entries;
  EXPECT_EQ(entries, 1) << "a temp file was left beside " << path;
  fs::remove_all(dir);
}

TEST(AtomicFile, FailsClearlyInAMissingDirectory) {
  try {
    writeFileAtomically("/nonexistent-ddprun-dir/file", "x");
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-ddprun-dir/file"), std::string::npos) << e.what();
  }
}

TEST(ErrorFile, RoundTripsInTorchelasticLayout) {
  const std::string dir = test::makeTempDir("errfile");
  const std::string path = dir + "/error.json";
  writeErrorFile(path, {"InjectedFault: boom", "trace", 1700000000});
  auto json = nlohmann::json::parse(test::readFile(path));
  EXPECT_EQ(json["message"]["message"], "InjectedFault: boom");
  EXPECT_EQ(json["message"]["extraInfo"]["py_callstack"], "trace");
  EXPECT_EQ(json["message"]["extraInfo"]["timestamp"], "1700000000");  // a string, as PyTorch writes it
  auto record = readErrorFile(path);
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ(record->message, "InjectedFault: boom");
  EXPECT_EQ(record->timestamp, 1700000000);
  EXPECT_FALSE(readErrorFile(dir + "/absent.json").has_value());
  std::ofstream(dir + "/bad.json") << "{not json";
  EXPECT_THROW(readErrorFile(dir + "/bad.json"), DataError);
  fs::remove_all(dir);
}

// The file PyTorch's own @record writes must be readable by us (python3-torch 1.13).
TEST(ErrorFile, ReadsTheFileWrittenByPyTorchRecord) {
  const std::string dir = test::makeTempDir("pyerr");
  const std::string path = dir + "/error.json";
  const std::string script =
      "from torch.distributed.elastic.multiprocessing.errors import record\n"
      "@record\n"
      "def main():\n"
      "    raise ValueError('bad learning rate')\n"
      "main()\n";
  auto result = test::runProcess(test::pythonExe(), {"-c", script}, {{"TORCHELASTIC_ERROR_FILE", path}});
  ASSERT_NE(result.exitCode, 0) << result.output;
  auto record = readErrorFile(path);
  ASSERT_TRUE(record.has_value()) << result.output;
  EXPECT_EQ(record->message, "ValueError: bad learning rate");
  EXPECT_NE(record->callstack.find("Traceback"), std::string::npos);
  EXPECT_GT(record->timestamp, 1600000000);
  fs::remove_all(dir);
}

// Hostile error files (a rank controls its TORCHELASTIC_ERROR_FILE): refused before they cost memory or time, each
// with what is wrong; out-of-range timestamps are ignored.
TEST(ErrorFile, HostileFilesAreRefusedSayingWhy) {
  const std::string dir = test::makeTempDir("hostile");
  const auto refusal = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir + "/" + name, std::ios::binary) << text;
    try {
      readErrorFile(dir + "/" + name);
    } catch (const DataError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(refusal("big.json", std::string(16u << 20, '[')).find("larger than 1 MiB"), std::string::npos);
  EXPECT_NE(refusal("deep.json", std::string(1u << 20, '[')).find("nested deeper than 16 levels"), std::string::npos);
  EXPECT_NE(refusal("deep-message.json", "{\"message\":" + std::string((1u << 20) - 16, '['))
                .find("nested deeper than 16 levels"),
            std::string::npos);
  std::string ones = "[";
  while (ones.size() < (1u << 20) - 4) ones += "1,";
  ones += "1]";
  EXPECT_NE(refusal("ones.json", ones).find("more than 4096 values"), std::string::npos);
  EXPECT_NE(refusal("array.json", "[1]").find("has no message"), std::string::npos);
  // Extra fields (torchelastic's own errorCode) are read past; only the known ones are kept.
  std::ofstream(dir + "/extra.json")
      << R"({"message":{"message":"E: x","errorCode":3,"extraInfo":{"py_callstack":"tb","timestamp":"1700000000"}},)"
      << R"("other":[{"a":[1,2]}]})";
  const auto extra = readErrorFile(dir + "/extra.json");
  ASSERT_TRUE(extra);
  EXPECT_EQ(extra->message, "E: x");
  EXPECT_EQ(extra->callstack, "tb");
  EXPECT_EQ(extra->timestamp, 1700000000);
  for (const std::string stamp : {"9223372036854775807", "-5", "99999999999999999999", "12x"}) {
    writeErrorFile(dir + "/stamp.json", {"E: y", "", 0});
    std::ofstream(dir + "/stamp.json") << R"({"message":{"message":"E: y","extraInfo":{"py_callstack":"","timestamp":")"
                                       << stamp << R"("}}})";
    const auto record = readErrorFile(dir + "/stamp.json");
    ASSERT_TRUE(record) << stamp;
    EXPECT_EQ(record->timestamp, 0) << stamp << ": out of range, ignored";
  }
  fs::remove_all(dir);
}

TEST(ProgressFile, FormatsAndParsesBothLayouts) {
  EXPECT_EQ(formatProgress({42, std::nullopt, "", std::nullopt, {}}), "42\n");
  EXPECT_EQ(formatProgress({42, 2688, "eval", std::nullopt, {}}), "42\n2688 eval\n");
  auto full = parseProgress("42\n2688 eval\n");
  ASSERT_TRUE(full.has_value());
  EXPECT_EQ(full->step, 42);
  EXPECT_EQ(full->samples, 2688);
  EXPECT_EQ(full->phase, "eval");
  auto stepOnly = parseProgress("7\n");  // what a 1-line Python integration writes
  ASSERT_TRUE(stepOnly.has_value());
  EXPECT_EQ(stepOnly->step, 7);
  EXPECT_FALSE(stepOnly->samples.has_value());
  // Stale bytes after the second line (a shorter report caught before its ftruncate) do not matter.
  EXPECT_EQ(parseProgress("8\n512 train\nnt\n")->phase, "train");
}

TEST(ProgressFile, EmptyHalfWrittenOrForeignContentIsNoRecord) {
  for (const char* bad : {"", "4", "12a\n", "-3\n", " 5\n", "\n", "99999999999999999999\n"}) {
    EXPECT_FALSE(parseProgress(bad).has_value()) << "'" << bad << "'";
  }
  auto partial = parseProgress("9\n51");  // line 2 still being written: the step stands
  ASSERT_TRUE(partial.has_value());
  EXPECT_EQ(partial->step, 9);
  EXPECT_FALSE(partial->samples.has_value());
}

TEST(ProgressFile, EachReportReplacesTheWholeContent) {
  const std::string dir = test::makeTempDir("progress");
  const std::string path = dir + "/progress";
  std::ofstream(path) << "left over from an earlier attempt, longer than any report\n";
  {
    ProgressFileWriter writer(path);
    EXPECT_EQ(test::readFile(path), "") << "opening empties the file";
    writer.report({1, 64, "train", std::nullopt, {}});
    EXPECT_EQ(test::readFile(path), "1\n64 train\n");
    writer.report({1, 64, "checkpoint", std::nullopt, {}});
    EXPECT_EQ(test::readFile(path), "1\n64 checkpoint\n");
    writer.report({1, 64, "train", std::nullopt, {}});  // shorter than the report before: truncated
    EXPECT_EQ(test::readFile(path), "1\n64 train\n");
  }
  EXPECT_THROW(ProgressFileWriter(dir + "/no/such/dir/progress"), IoError);
  fs::remove_all(dir);
}

}  // namespace ddprun
