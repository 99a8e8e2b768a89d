// The Python position reader against real CPython processes (tests/scripts/python_positions.py): the frames,
// lines and variables it reads must be the interpreter's own, a spin must read the same every time, a pure-Python
// computation must not, and what is not CPython 3.11 must say so rather than guess.
#include "launcher/watch/evidence/python_position.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "support/child_process.hpp"
#include "support/wait_until.hpp"

namespace ddprun::launcher {
namespace {

using namespace std::chrono_literals;
using Status = PythonPosition::Status;

const std::string kScript = std::string(DDPRUN_SOURCE_DIR) + "/tests/scripts/python_positions.py";

/// The line of the script that carries `marker` (a comment), 1-based.
int lineWith(const std::string& marker) {
  std::ifstream in(kScript);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find(marker) != std::string::npos) return number;
  }
  return 0;
}

/// "3.11" for the Python the tests run.
std::string pythonVersion() {
  const auto r = test::runProcess(test::pythonExe(), {"-c", "import sys; print('%d.%d' % sys.version_info[:2])"});
  return r.output.substr(0, r.output.find('\n'));
}

/// Reads until a read is not kMoved (a read may race the interpreter) or 50 reads have raced.
PythonPosition readSettled(PythonPositionReader& reader, pid_t pid) {
  PythonPosition position;
  for (int i = 0; i < 50; ++i) {
    position = reader.read(pid);
    if (position.status != Status::kMoved) break;
  }
  return position;
}

TEST(PythonPosition, TheLineTableIsReadAsCPythonReadsIt) {
  if (pythonVersion() != "3.11") GTEST_SKIP() << "the line table format read is CPython 3.11's";
  const auto r = test::runProcess(test::pythonExe(), {kScript, "lines"});
  ASSERT_EQ(r.exitCode, 0) << r.output;
  std::istringstream codes(r.output);
  std::string firstLine, table, units;
  int checked = 0;
  while (codes >> firstLine >> table >> units) {
    std::string bytes;
    for (size_t i = 0; i + 1 < table.size(); i += 2)
      bytes += static_cast<char>(std::stoi(table.substr(i, 2), nullptr, 16));
    std::istringstream lines(units);
    std::string expected;
    for (int offset = 0; std::getline(lines, expected, ','); ++offset) {
      EXPECT_EQ(pythonLineAt(bytes, std::stoi(firstLine), offset), std::stoi(expected))
          << "code object starting at line " << firstLine << ", unit " << offset;
      ++checked;
    }
  }
  EXPECT_GT(checked, 200);
  EXPECT_EQ(pythonLineAt("", 7, -1), 7);  // before the first instruction: the first line
}

TEST(PythonPosition, ASpinReadsAsTheSameFewStatesWithItsFramesAndLines) {
  test::ChildProcess spin(test::pythonExe(), {kScript, "spin"}, {});
  ASSERT_TRUE(test::waitForOutput(spin, "ready", 60s)) << spin.outputSoFar();
  PythonPositionReader reader;
  // "ready" is written before print() returns: read until the loop runs.
  PythonPosition first = readSettled(reader, spin.pid());
  for (int i = 0; i < 100 && first.status == Status::kRead && first.frames[0].line != lineWith("# SPIN-LINE"); ++i) {
    std::this_thread::sleep_for(20ms);
    first = readSettled(reader, spin.pid());
  }
  if (pythonVersion() != "3.11") {
    EXPECT_EQ(first.status, Status::kUnreadable);
    EXPECT_NE(first.why.find("CPython " + pythonVersion()), std::string::npos) << first.why;
    return;
  }
  ASSERT_EQ(first.status, Status::kRead) << first.why;
  ASSERT_EQ(first.frames.size(), 3u);
  EXPECT_EQ(first.frames[0].file, kScript);
  EXPECT_EQ(first.frames[0].function, "wait_forever");
  EXPECT_EQ(first.frames[0].line, lineWith("# SPIN-LINE"));
  EXPECT_EQ(first.frames[1].function, "outer");
  EXPECT_EQ(first.frames[1].line, lineWith("# CALL-LINE"));
  EXPECT_EQ(first.frames[2].function, "<module>");
  EXPECT_EQ(first.where(),
            "File \"" + kScript + "\", line " + std::to_string(lineWith("# SPIN-LINE")) + ", in wait_forever");
  // The loop comes back to the same few states: its evaluation stack holds `done` or nothing, as the read finds it,
  // on one of the loop's few bytecodes.
  std::set<uint64_t> states{first.state};
  std::set<uint64_t> instructions{first.instruction};
  for (int i = 0; i < 30; ++i) {
    std::this_thread::sleep_for(20ms);
    const PythonPosition again = readSettled(reader, spin.pid());
    ASSERT_EQ(again.status, Status::kRead) << again.why;
    EXPECT_EQ(again.frames.size(), 3u);
    states.insert(again.state);
    instructions.insert(again.instruction);
  }
  EXPECT_LE(states.size(), 6u);
  EXPECT_GE(instructions.size(), 2u) << "a loop moves over its bytecodes";
  // Gone (its pid may come back as another program): no interpreter there any more.
  spin.sendSignal(SIGKILL);
  spin.wait(10s);
  EXPECT_EQ(reader.read(spin.pid()).status, Status::kNotPython);
}

class PythonComputation : public ::testing::TestWithParam<const char*> {};

// A metric summed sample by sample; a huge int whose only change is in its middle digits (a loop whose variable
// keeps its size, its lowest and its highest digits).
INSTANTIATE_TEST_SUITE_P(Loops, PythonComputation, ::testing::Values("compute", "bigint"));

TEST_P(PythonComputation, ReadsAsANewStateNearlyEveryTime) {
  if (pythonVersion() != "3.11") GTEST_SKIP() << "reads CPython 3.11 only";
  test::ChildProcess compute(test::pythonExe(), {kScript, GetParam()}, {});
  ASSERT_TRUE(test::waitForOutput(compute, "ready", 60s)) << compute.outputSoFar();
  PythonPositionReader reader;
  std::set<uint64_t> states;
  int read = 0;
  for (int i = 0; i < 20; ++i) {
    std::this_thread::sleep_for(20ms);  // the watch reads twice a second; the loop runs meanwhile
    const PythonPosition position = reader.read(compute.pid());
    if (position.status != Status::kRead) continue;
    ++read;
    EXPECT_EQ(position.frames.at(0).function, GetParam());
    states.insert(position.state);
  }
  EXPECT_GE(read, 10);
  // The loop variable and the sum change from one read to the next (a read may land between them rebinding).
  EXPECT_GE(states.size(), static_cast<size_t>(read) - 2);
}

TEST(PythonPosition, OneLongCallReadsAsOneStateOnOneBytecode) {
  if (pythonVersion() != "3.11") GTEST_SKIP() << "reads CPython 3.11 only";
  test::ChildProcess call(test::pythonExe(), {kScript, "longcall"}, {});
  ASSERT_TRUE(test::waitForOutput(call, "ready", 60s)) << call.outputSoFar();
  PythonPositionReader reader;
  PythonPosition first = readSettled(reader, call.pid());
  for (int i = 0; i < 100 && first.status == Status::kRead && first.frames[0].function != "longcall"; ++i) {
    std::this_thread::sleep_for(20ms);
    first = readSettled(reader, call.pid());
  }
  ASSERT_EQ(first.status, Status::kRead) << first.why;
  std::this_thread::sleep_for(20ms);  // print() may still have been returning: the call has begun after this read
  first = readSettled(reader, call.pid());
  for (int i = 0; i < 10; ++i) {
    std::this_thread::sleep_for(20ms);
    const PythonPosition again = readSettled(reader, call.pid());
    EXPECT_EQ(again.state, first.state);
    EXPECT_EQ(again.instruction, first.instruction);
  }
}

TEST(PythonPosition, AProgramThatIsNoPythonIsSaidToBeSo) {
  test::ChildProcess sleeper("/bin/sleep", {"60"}, {});
  ASSERT_TRUE(test::waitUntil(
      [&] {
        std::ifstream maps("/proc/" + std::to_string(sleeper.pid()) + "/maps");
        return std::string(std::istreambuf_iterator<char>(maps), {}).find("libc") != std::string::npos;
      },
      30s));
  PythonPositionReader reader;
  const PythonPosition position = reader.read(sleeper.pid());
  EXPECT_EQ(position.status, Status::kNotPython);
  EXPECT_TRUE(position.frames.empty());
}

}  // namespace
}  // namespace ddprun::launcher
