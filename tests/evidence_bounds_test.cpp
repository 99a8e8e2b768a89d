// Nothing the watch reads of a rank can stop or grow the agent: the Python position reader against hostile and merely
// huge processes (a FIFO where the maps name the interpreter, crafted ELF sizes, a deep state, an interpreter at a path
// with a space, one that execs itself, another CPython version), and the off-loop reader that abandons a read that
// gets stuck. Real processes: python3 (tests/scripts/python_positions.py) and two small programs
// (tests/programs/map_files.cpp, fake_python.cpp).
#include <elf.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "launcher/watch/evidence/machine_evidence.hpp"
#include "launcher/watch/evidence/python_position.hpp"
#include "support/child_process.hpp"
#include "support/wait_until.hpp"

namespace ddprun::launcher {
namespace {
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Status = PythonPosition::Status;

const std::string kScript = std::string(DDPRUN_SOURCE_DIR) + "/tests/scripts/python_positions.py";

/// Reads until a read is not kMoved (a read may race the interpreter) or 50 reads have raced.
PythonPosition readSettled(PythonPositionReader& reader, pid_t pid) {
  PythonPosition position;
  for (int i = 0; i < 50; ++i) {
    position = reader.read(pid);
    if (position.status != Status::kMoved) break;
  }
  return position;
}

/// Reads until the innermost frame is `function` (the script may still be on its way there).
PythonPosition readUntilIn(PythonPositionReader& reader, pid_t pid, const std::string& function) {
  PythonPosition position;
  test::waitUntil(
      [&] {
        position = readSettled(reader, pid);
        return position.status == Status::kRead && !position.frames.empty() && position.frames[0].function == function;
      },
      60s);
  return position;
}

long maxRssKiB() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

bool isRoot() { return ::geteuid() == 0; }

TEST(EvidenceBounds, AFifoWhereARanksMapsNameTheInterpreterIsNeverWaitedOn) {
  // The rank maps a file named python3.11 in a mount namespace of its own (a container, say); in ddprun's, the same
  // path is a FIFO nobody writes. Opening it to read the interpreter's symbols would wait for ever.
  if (!isRoot()) GTEST_SKIP() << "needs a mount namespace (root)";
  const std::string dir = test::makeTempDir("fifo-maps");
  ASSERT_EQ(::mkfifo((dir + "/python3.11").c_str(), 0600), 0);
  const std::string inside = "mount -t tmpfs none '" + dir + "' && head -c 4096 /dev/urandom > '" + dir +
                             "/python3.11' && exec '" + std::string(DDPRUN_MAP_FILES_BIN) + "' '" + dir +
                             "/python3.11'";
  test::ChildProcess rank("/usr/bin/unshare", {"--mount", "--propagation", "private", "sh", "-c", inside}, {});
  ASSERT_TRUE(test::waitForOutput(rank, "ready", 60s)) << rank.outputSoFar();
  PythonPositionReader reader;
  auto read = std::async(std::launch::async, [&] { return reader.read(rank.pid()); });
  const bool returned = read.wait_for(10s) == std::future_status::ready;
  if (!returned) {  // let the stuck reader go before failing
    const int writer = ::open((dir + "/python3.11").c_str(), O_WRONLY | O_NONBLOCK);
    read.wait();
    ::close(writer);
  }
  ASSERT_TRUE(returned) << "the reader waited on the FIFO";
  const PythonPosition position = read.get();
  EXPECT_NE(position.status, Status::kRead);
  EXPECT_NE(position.why.find("python3.11"), std::string::npos) << position.why;
  rank.sendSignal(SIGKILL);
  rank.wait(10s);
  fs::remove_all(dir);
}

/// An ELF header that claims a dynamic symbol table of `symbolBytes` whose names take `nameBytes`, both past the end
/// of the file.
std::string craftedElf(uint64_t symbolBytes, uint64_t nameBytes, uint16_t sections = 2) {
  Elf64_Ehdr header{};
  std::memcpy(header.e_ident, ELFMAG, SELFMAG);
  header.e_ident[EI_CLASS] = ELFCLASS64;
  header.e_ident[EI_DATA] = ELFDATA2LSB;
  header.e_ident[EI_VERSION] = EV_CURRENT;
  header.e_type = ET_DYN;
  header.e_machine = EM_X86_64;
  header.e_version = EV_CURRENT;
  header.e_ehsize = sizeof(Elf64_Ehdr);
  header.e_phentsize = sizeof(Elf64_Phdr);
  header.e_shentsize = sizeof(Elf64_Shdr);
  header.e_shoff = sizeof(Elf64_Ehdr);
  header.e_shnum = sections;
  Elf64_Shdr names{};
  names.sh_type = SHT_STRTAB;
  names.sh_offset = 0;
  names.sh_size = nameBytes;
  Elf64_Shdr symbols{};
  symbols.sh_type = SHT_DYNSYM;
  symbols.sh_offset = 0;
  symbols.sh_size = symbolBytes;
  symbols.sh_link = 0;
  std::string bytes(reinterpret_cast<const char*>(&header), sizeof header);
  bytes.append(reinterpret_cast<const char*>(&names), sizeof names);
  bytes.append(reinterpret_cast<const char*>(&symbols), sizeof symbols);
  bytes.resize(8192, '\0');
  return bytes;
}

TEST(EvidenceBounds, CraftedElfSizesAreRefusedWithoutGrowingTheReader) {
  const std::string dir = test::makeTempDir("elf-sizes");
  // A name table of 1 GiB and symbols of 2 GiB, as the file claims; and 65,535 section headers far past its end.
  std::ofstream(dir + "/python3.11", std::ios::binary) << craftedElf(2ull << 30, 1ull << 30);
  std::ofstream(dir + "/libpython3.11.so.1.0", std::ios::binary) << craftedElf(24, 16, 65535);
  test::ChildProcess rank(DDPRUN_MAP_FILES_BIN, {dir + "/python3.11", dir + "/libpython3.11.so.1.0"}, {});
  ASSERT_TRUE(test::waitForOutput(rank, "ready", 60s)) << rank.outputSoFar();
  const long before = maxRssKiB();
  PythonPositionReader reader;
  const PythonPosition position = reader.read(rank.pid());
  EXPECT_NE(position.status, Status::kRead);
  EXPECT_NE(position.why.find("cannot be read"), std::string::npos) << position.why;
  EXPECT_LT(maxRssKiB() - before, 64 * 1024) << "the reader grew by what the file claims";
  rank.sendSignal(SIGKILL);
  rank.wait(10s);
  fs::remove_all(dir);
}

TEST(EvidenceBounds, ADeepStateWithHugeLocalsIsReadWithinItsBounds) {
  // 250 frames; the innermost holds 1,000 locals, each its own 64 KiB int (64 MiB in all).
  test::ChildProcess rank(test::pythonExe(), {kScript, "deep"}, {});
  ASSERT_TRUE(test::waitForOutput(rank, "ready", 120s)) << rank.outputSoFar();
  PythonPositionReader reader;
  const PythonPosition position = readUntilIn(reader, rank.pid(), "innermost");
  ASSERT_EQ(position.status, Status::kRead) << position.why;
  EXPECT_EQ(position.frames.size(), 252u) << "deep(), 249 of down(), innermost() and the module";
  EXPECT_LE(reader.lastReadBytes(), size_t{1} << 20) << "strings, line tables and values within 1 MiB";
  EXPECT_GT(reader.lastReadBytes(), size_t{512} << 10) << "the budget is used, not skipped";
  rank.sendSignal(SIGKILL);
  rank.wait(10s);
}

TEST(EvidenceBounds, AnInterpreterAtAPathWithASpaceIsRead) {
  const std::string dir = test::makeTempDir("space") + "/with space";
  fs::create_directories(dir);
  fs::copy_file(fs::canonical(test::pythonExe()), dir + "/python3.11");
  test::ChildProcess rank(dir + "/python3.11", {kScript, "spin"}, {});
  ASSERT_TRUE(test::waitForOutput(rank, "ready", 60s)) << rank.outputSoFar();
  PythonPositionReader reader;
  const PythonPosition position = readUntilIn(reader, rank.pid(), "wait_forever");
  EXPECT_EQ(position.status, Status::kRead) << position.why;
  rank.sendSignal(SIGKILL);
  rank.wait(10s);
  fs::remove_all(fs::path(dir).parent_path());
}

TEST(EvidenceBounds, APythonThatExecsItselfIsFoundAgain) {
  const std::string dir = test::makeTempDir("reexec");
  test::ChildProcess rank(test::pythonExe(), {kScript, "reexec", dir + "/go"}, {});
  ASSERT_TRUE(test::waitForOutput(rank, "ready", 60s)) << rank.outputSoFar();
  PythonPositionReader reader;
  EXPECT_EQ(readUntilIn(reader, rank.pid(), "before_exec").status, Status::kRead);
  std::ofstream(dir + "/go") << "";
  // The same pid, a new interpreter at new addresses: the reader finds it instead of reading the old one's.
  const PythonPosition after = readUntilIn(reader, rank.pid(), "wait_forever");
  EXPECT_EQ(after.status, Status::kRead) << after.why;
  ASSERT_FALSE(after.frames.empty());
  EXPECT_EQ(after.frames[0].function, "wait_forever");
  rank.sendSignal(SIGKILL);
  rank.wait(10s);
  // One that execs a program that is no Python: it is read as what it is now, not through the interpreter it was.
  test::ChildProcess leaves(test::pythonExe(), {kScript, "reexec", dir + "/go-sleep", "sleep"}, {});
  ASSERT_TRUE(test::waitForOutput(leaves, "ready", 60s)) << leaves.outputSoFar();
  EXPECT_EQ(readUntilIn(reader, leaves.pid(), "before_exec").status, Status::kRead);
  std::ofstream(dir + "/go-sleep") << "";
  EXPECT_TRUE(test::waitUntil([&] { return reader.read(leaves.pid()).status == Status::kNotPython; }, 30s))
      << "still read as the Python it was: " << reader.read(leaves.pid()).why;
  leaves.sendSignal(SIGKILL);
  leaves.wait(10s);
  fs::remove_all(dir);
}

TEST(EvidenceBounds, AnotherCPythonVersionIsUnreadableNotGuessedAt) {
  test::ChildProcess rank(DDPRUN_FAKE_PYTHON312_BIN, {}, {});
  ASSERT_TRUE(test::waitForOutput(rank, "ready", 60s)) << rank.outputSoFar();
  PythonPositionReader reader;
  const PythonPosition position = reader.read(rank.pid());
  EXPECT_EQ(position.status, Status::kUnreadable);
  EXPECT_NE(position.why.find("CPython 3.12"), std::string::npos)
      << position.why << " (" << static_cast<int>(position.status) << ")";
  EXPECT_NE(position.why.find("it reads 3.11"), std::string::npos) << position.why;
  rank.sendSignal(SIGKILL);
  rank.wait(10s);
}

TEST(OffLoopReader, AReadThatGetsStuckIsAbandonedAndTheNextRunsOnAFreshThread) {
  boost::asio::io_context io;
  OffLoopReader<EvidenceReaders> reader(io);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  bool stuckResultRan = false;
  pid_t overrunPid = 0;
  bool overrunMemory = false;
  reader.run(
      [released, &stuckResultRan](EvidenceReaders& readers) -> std::function<void()> {
        readers.reading = 4242;
        readers.readingMemory = true;
        released.wait();  // a read that does not come back (userfaultfd, a hung file system)
        return [&stuckResultRan] { stuckResultRan = true; };
      },
      100ms,
      [&](const EvidenceReaders* stuck) {
        overrunPid = stuck->reading;
        overrunMemory = stuck->readingMemory;
      });
  // Queued behind it, a job with a budget of its own that counts from its start: it runs, late, on a fresh thread.
  bool skipsStuck = false;
  bool queuedOverran = false;
  reader.run(
      [&skipsStuck](EvidenceReaders& readers) -> std::function<void()> {
        skipsStuck = readers.skipMemory.count(4242) == 1;
        return [] {};
      },
      50ms, [&](const EvidenceReaders*) { queuedOverran = true; });
  bool nextRan = false;
  reader.run([&nextRan](EvidenceReaders&) -> std::function<void()> { return [&nextRan] { nextRan = true; }; }, 5s,
             [](const EvidenceReaders*) {});
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!nextRan && std::chrono::steady_clock::now() < deadline) io.run_one_for(100ms);
  EXPECT_TRUE(nextRan) << "the jobs after the stuck one ran on a fresh thread";
  EXPECT_EQ(overrunPid, 4242);
  EXPECT_TRUE(overrunMemory);
  EXPECT_TRUE(skipsStuck) << "the fresh thread does not read that process's memory again";
  EXPECT_FALSE(queuedOverran) << "waiting behind a stuck job is no overrun of its own";
  release.set_value();  // the stuck read comes back at last: what it returns is dropped
  std::this_thread::sleep_for(100ms);
  io.poll();
  EXPECT_FALSE(stuckResultRan);
}

TEST(OffLoopReader, AfterFourStuckReadsEveryJobFailsAtOnce) {
  boost::asio::io_context io;
  OffLoopReader<EvidenceReaders> reader(io);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  int overruns = 0;
  int stillRan = 0;
  for (int i = 0; i < OffLoopReader<EvidenceReaders>::kMaxAbandoned + 2; ++i) {
    reader.run(
        [released](EvidenceReaders&) -> std::function<void()> {
          released.wait();
          return nullptr;
        },
        50ms, [&](const EvidenceReaders*) { ++overruns; });
  }
  reader.run([&](EvidenceReaders&) -> std::function<void()> { return [&] { ++stillRan; }; }, 50ms,
             [&](const EvidenceReaders* stuck) { overruns += stuck == nullptr ? 1 : 100; });
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (overruns < OffLoopReader<EvidenceReaders>::kMaxAbandoned + 3 && std::chrono::steady_clock::now() < deadline) {
    io.run_one_for(100ms);
  }
  EXPECT_TRUE(reader.givenUp());
  EXPECT_EQ(overruns, OffLoopReader<EvidenceReaders>::kMaxAbandoned + 3) << "each job heard of its end once";
  EXPECT_EQ(stillRan, 0);
  release.set_value();
}

TEST(MachineEvidence, ReadsOfARanksMemoryHappenOffTheAgentsLoop) {
  test::ChildProcess rank(test::pythonExe(), {kScript, "deep"}, {});
  ASSERT_TRUE(test::waitForOutput(rank, "ready", 120s)) << rank.outputSoFar();
  boost::asio::io_context io;
  ChildReaper reaper(io);
  MachineEvidence evidence(io, reaper);
  std::vector<RankSample> got;
  bool done = false;
  const auto started = std::chrono::steady_clock::now();
  evidence.sample({{0, rank.pid(), true, true, true}}, [&](std::vector<RankSample> samples) {
    got = std::move(samples);
    done = true;
  });
  EXPECT_FALSE(done) << "never answered inside the call";
  EXPECT_LT(std::chrono::steady_clock::now() - started, 50ms) << "the call only hands the targets over";
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!done && std::chrono::steady_clock::now() < deadline) io.run_one_for(100ms);
  ASSERT_TRUE(done);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_GE(got[0].counters.processes, 1);
  ASSERT_TRUE(got[0].python.has_value());
  EXPECT_NE(got[0].python->status, Status::kNotPython);
  rank.sendSignal(SIGKILL);
  rank.wait(10s);
}

}  // namespace
}  // namespace ddprun::launcher
