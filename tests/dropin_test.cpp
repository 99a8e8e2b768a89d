// ddprun as a drop-in for torchrun users, with real python3-torch scripts: output shown as it is written
// (tqdm), pseudo-terminals, stdin for rank 0 (input() and pdb), Ctrl-Z, a console reader that stops
// reading, memory with endless lines, the right Python, log directories that are never shared or lost, the
// failure summary, torchrun's flags and environment.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "support/child_process.hpp"
#include "support/pty_session.hpp"
#include "support/wait_until.hpp"

extern char** environ;

namespace ddprun::launcher {
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using test::waitUntil;
namespace {

const std::string kDdprun = DDPRUN_BIN;
const std::string kSource = DDPRUN_SOURCE_DIR;

std::map<std::string, std::string> pythonEnv(std::map<std::string, std::string> env = {}) {
  env.emplace("PYTHON_EXEC", test::pythonExe());
  return env;
}

test::ChildResult ddprun(const std::vector<std::string>& args, const std::map<std::string, std::string>& env = {},
                         std::chrono::milliseconds timeout = 90s) {
  return test::runProcess(kDdprun, args, pythonEnv(env), timeout);
}

/// Writes `text` to a new file in `dir` and returns its path.
std::string writeScript(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << text;
  return path;
}

std::vector<int> pidsIn(const std::string& dir, int n) {
  std::vector<int> pids;
  for (int r = 0; r < n; ++r) pids.push_back(std::atoi(test::readFile(dir + "/pid" + std::to_string(r)).c_str()));
  return pids;
}

// --- terminal and output relay --------------------------------------------------------------------------------

TEST(DropIn, WorkersSeeATerminalWhenDdprunHasOneAndPipesOtherwise) {
  const std::vector<std::string> args{"--nproc-per-node", "2",  "--standalone",
                                      test::pythonExe(),  "-c", "import os; print('tty', os.isatty(1), os.isatty(2))"};
  test::PtySession tty(kDdprun, args, pythonEnv());
  auto r = tty.wait(60s);
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_NE(r.output.find("[rank0]:tty True True"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[rank1]:tty True True"), std::string::npos) << r.output;
  std::vector<std::string> noTty = args;
  noTty.insert(noTty.begin(), "--no-tty");
  test::PtySession off(kDdprun, noTty, pythonEnv());
  auto o = off.wait(60s);
  EXPECT_NE(o.output.find("[rank0]:tty False False"), std::string::npos) << o.output;
  auto piped = ddprun(args);
  EXPECT_NE(piped.output.find("[rank1]:tty False False"), std::string::npos) << piped.output;
}

TEST(DropIn, ATqdmBarMovesOnScreenBeforeItsLineEnds) {
  // Each step waits for the test to see the previous one: the bar can only advance if ddprun shows the
  // '\r' redraws while tqdm's line is still open (tqdm writes its '\n' only when it closes).
  const std::string dir = test::makeTempDir("tqdm");
  const std::string script = writeScript(dir, "bar.py",
                                         "import os, time, sys\n"
                                         "from tqdm import tqdm\n"
                                         "for i in tqdm(range(3), mininterval=0, ncols=60):\n"
                                         "    while not os.path.exists(f'" +
                                             dir + "/go{i}'): time.sleep(0.02)\n");
  test::PtySession tty(kDdprun, {"--standalone", script}, pythonEnv());
  for (int i = 0; i < 3; ++i) {
    const std::string shown = "[rank0]:" + std::string(i < 1 ? "  0%" : i < 2 ? " 33%" : " 67%");
    ASSERT_TRUE(tty.waitFor(shown, 30s)) << "step " << i << " not on screen:\n" << tty.output();
    std::ofstream(dir + "/go" + std::to_string(i)) << "";
  }
  auto r = tty.wait(30s);
  EXPECT_EQ(r.exitCode, 0) << r.output;
  // On a terminal the bar is redrawn in place: back to the line's start, clear, draw.
  EXPECT_NE(r.output.find("\r\x1b[J[rank0]:100%"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

TEST(DropIn, LocalRankZeroReadsStdinForInputAndPdbTheOthersGetEndOfFile) {
  const std::string dir = test::makeTempDir("stdin");
  const std::string script = writeScript(dir, "ask.py",
                                         "import os, sys\n"
                                         "if os.environ['LOCAL_RANK'] != '0':\n"
                                         "    print('stdin empty:', sys.stdin.read() == '')\n"
                                         "    sys.exit(0)\n"
                                         "name = input('name? ')\n"
                                         "print('got', name)\n"
                                         "x = 6\n"
                                         "breakpoint()\n"
                                         "print('after pdb')\n");
  test::PtySession tty(kDdprun, {"--nproc-per-node", "2", "--standalone", script}, pythonEnv());
  ASSERT_TRUE(tty.waitFor("[rank0]:name? ", 60s)) << tty.output();  // a prompt without a newline is shown
  tty.send("alice\n");
  ASSERT_TRUE(tty.waitFor("got alice", 30s)) << tty.output();
  ASSERT_TRUE(tty.waitFor("(Pdb)", 30s)) << tty.output();
  tty.send("p x * 7\n");
  ASSERT_TRUE(tty.waitFor("42", 30s)) << tty.output();
  tty.send("c\n");
  auto r = tty.wait(30s);
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_NE(r.output.find("after pdb"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[rank1]:stdin empty: True"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("BdbQuit"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

TEST(DropIn, KillingARankHeldAtAPdbPromptGivesTheTerminalItsModeBack) {
  // pdb's readline switches the terminal to raw mode while it waits at its prompt; rank 0 killed there would leave it
  // so (the shell echoing nothing afterwards) unless ddprun puts the mode back.
  const std::string dir = test::makeTempDir("pdbkill");
  const std::string script = writeScript(dir, "stop.py",
                                         "import os, pathlib\n"
                                         "if os.environ['LOCAL_RANK'] == '0':\n"
                                         "    pathlib.Path(os.environ['PID_FILE']).write_text(str(os.getpid()))\n"
                                         "    breakpoint()\n");
  auto env = pythonEnv();
  env["PID_FILE"] = dir + "/pid";
  test::PtySession tty(kDdprun, {"--nproc-per-node", "1", "--standalone", script}, env);
  ASSERT_TRUE(tty.waitFor("(Pdb)", 60s)) << tty.output();
  ASSERT_TRUE(waitUntil([&] { return !tty.cookedMode(); }, 10s)) << "pdb did not change the terminal's mode";
  ::kill(std::stoi(test::readFile(dir + "/pid")), SIGKILL);
  auto r = tty.wait(30s);
  EXPECT_EQ(r.exitCode, 1) << r.output;
  EXPECT_TRUE(tty.cookedMode()) << "the terminal was left in pdb's raw mode";
  fs::remove_all(dir);
}

TEST(DropIn, CtrlZStopsTheWorkersAndContinuingResumesThem) {
  const std::string dir = test::makeTempDir("ctrlz");
  const std::string script = writeScript(dir, "tick.py",
                                         "import os, time\n"
                                         "r = os.environ['RANK']\n"
                                         "open(f'" +
                                             dir +
                                             "/tmp{r}', 'w').write(str(os.getpid()))\n"
                                             "os.rename(f'" +
                                             dir + "/tmp{r}', f'" + dir +
                                             "/pid{r}')\n"
                                             "while not os.path.exists('" +
                                             dir + "/stop'): time.sleep(0.05)\n");
  test::PtySession tty(kDdprun, {"--nproc-per-node", "2", "--standalone", script}, pythonEnv());
  ASSERT_TRUE(waitUntil([&] { return fs::exists(dir + "/pid0") && fs::exists(dir + "/pid1"); }, 60s));
  const auto pids = pidsIn(dir, 2);
  ::kill(tty.pid(), SIGCONT);  // continues nothing (nothing is stopped): no "continued" line for it
  tty.send("\x1a");            // Ctrl-Z at the terminal: SIGTSTP to ddprun's process group
  EXPECT_TRUE(waitUntil([&] { return test::processState(tty.pid()) == 'T'; }, 10s)) << tty.output();
  for (int pid : pids) EXPECT_TRUE(waitUntil([&] { return test::processState(pid) == 'T'; }, 10s)) << pid;
  ::kill(tty.pid(), SIGCONT);  // what fg or bg sends
  for (int pid : pids) EXPECT_TRUE(waitUntil([&] { return test::processState(pid) != 'T'; }, 10s)) << pid;
  EXPECT_TRUE(waitUntil([&] { return test::processState(tty.pid()) != 'T'; }, 10s));
  std::ofstream(dir + "/stop") << "";
  auto r = tty.wait(30s);
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_EQ(test::occurrences(r.output, "continued (SIGCONT): the workers run again"), 1u) << r.output;
  fs::remove_all(dir);
}

/// Starts ddprun with stdout on a pipe the test holds but never reads (a `| less` that stopped), stderr
/// to `errFile`.
pid_t spawnWithStuckStdout(const std::vector<std::string>& args, const std::string& errFile, int& readEnd) {
  int fds[2];
  EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  readEnd = fds[0];
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, errFile.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  std::vector<std::string> text{kDdprun};
  text.insert(text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : text) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::setenv("PYTHON_EXEC", test::pythonExe().c_str(), 1);
  pid_t pid = -1;
  EXPECT_EQ(posix_spawn(&pid, kDdprun.c_str(), &actions, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  return pid;
}

/// Waits up to `timeout` for `pid`; returns its wait status, or -1 (after killing it) on timeout.
int waitFor(pid_t pid, std::chrono::milliseconds timeout) {
  int status = 0;
  if (!waitUntil([&] { return ::waitpid(pid, &status, WNOHANG) != 0; }, timeout)) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    return -1;
  }
  return status;
}

std::string readAll(int fd);
bool statusShows(const std::string& errFile, const std::function<bool(const std::string&)>& condition,
                 std::chrono::milliseconds timeout);

TEST(DropIn, AReaderThatStopsReadingNeverHoldsUpAFailureOrASignal) {
  const std::string dir = test::makeTempDir("stuck");
  // Rank 0 floods stdout; rank 1 fails once rank 0 has written 2 MiB (it says so in a file: a fixed delay would
  // race rank 0's start on a busy machine). Nobody reads ddprun's stdout: the failure is handled and reported at
  // once; the output then waits for its reader, as under torchrun (its workers' bytes wait in the pipe).
  const std::string flood = writeScript(dir, "flood.py",
                                        "import os, sys, time\n"
                                        "flooded = os.path.join(os.path.dirname(__file__), 'flooded')\n"
                                        "if os.environ['RANK'] == '1':\n"
                                        "    while not os.path.exists(flooded): time.sleep(0.01)\n"
                                        "    sys.exit(3)\n"
                                        "line = 'x' * 999 + '\\n'\n"
                                        "for _ in range(2048): sys.stdout.write(line)\n"
                                        "sys.stdout.flush()\n"
                                        "open(flooded, 'w').close()\n"
                                        "while True: sys.stdout.write(line)\n");
  int readEnd = -1;
  const auto start = std::chrono::steady_clock::now();
  pid_t pid = spawnWithStuckStdout({"--nproc-per-node", "2", "--standalone", "--stop-timeout", "3", flood},
                                   dir + "/err", readEnd);
  ASSERT_TRUE(waitUntil([&] { return test::readFile(dir + "/err").find("Root Cause") != std::string::npos; }, 30s))
      << test::readFile(dir + "/err");
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took, 15s) << test::readFile(dir + "/err");  // start-up, 2 MiB, the failure, the 3 s stop timeout
  int status = 0;
  EXPECT_EQ(::waitpid(pid, &status, WNOHANG), 0) << "the console's bytes were not waited for";
  const std::string shown = readAll(readEnd);  // the reader comes back: ddprun delivers what it holds, then ends
  status = waitFor(pid, 30s);
  const std::string err = test::readFile(dir + "/err");
  ASSERT_NE(status, -1) << "ddprun did not end once its reader read\n" << err;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status << "\n" << err;
  EXPECT_GT(shown.size(), 1u << 20);
  EXPECT_EQ(err.find("console-unshown"), std::string::npos) << err;
  EXPECT_NE(err.find("Root Cause"), std::string::npos) << err;
  EXPECT_NE(err.find("rank      : 1 (local_rank: 1)"), std::string::npos) << err;
  EXPECT_NE(err.find("exitcode  : 3"), std::string::npos) << err;
  ::close(readEnd);

  // SIGTERM to ddprun while its stdout is stuck and a worker ignores SIGTERM: out within the stop timeout.
  const std::string stubborn = writeScript(dir, "stubborn.py",
                                           "import signal, sys\n"
                                           "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                                           "line = 'y' * 999 + '\\n'\n"
                                           "while True: sys.stdout.write(line)\n");
  pid = spawnWithStuckStdout({"--standalone", "--status-port", "0", "--stop-timeout", "2", stubborn}, dir + "/err2",
                             readEnd);
  // The pipe and the console queue are full: ddprun says it holds the rank's output back (and the rank, having
  // written 4 MiB, ignores SIGTERM by now).
  const bool held = statusShows(
      dir + "/err2", [](const std::string& json) { return json.find("\"output_held\":true") != std::string::npos; },
      60s);
  EXPECT_TRUE(held) << "ddprun never held the rank's output back\n" << test::readFile(dir + "/err2");
  if (!held) {
    waitFor(pid, 0ms);  // kills it
    ::close(readEnd);
    return;
  }
  const auto signalled = std::chrono::steady_clock::now();
  ::kill(pid, SIGTERM);
  const int status2 = waitFor(pid, 30s);
  const auto stopped = std::chrono::steady_clock::now() - signalled;
  const std::string err2 = test::readFile(dir + "/err2");
  ASSERT_NE(status2, -1) << err2;
  EXPECT_TRUE(WIFEXITED(status2) && WEXITSTATUS(status2) == 128 + SIGTERM) << status2 << "\n" << err2;
  EXPECT_LT(stopped, 8s) << err2;  // the 2 s stop timeout, the kill, and the bounded console flush
  EXPECT_NE(err2.find("did not stop within 2 s"), std::string::npos) << err2;
  ::close(readEnd);
  fs::remove_all(dir);
}

/// Reads everything from `fd` until end of file.
std::string readAll(int fd) {
  std::string text;
  char buffer[65536];
  for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) > 0;) text.append(buffer, static_cast<size_t>(n));
  return text;
}

size_t countOf(const std::string& text, const std::string& what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++count;
  return count;
}

/// Polls ddprun's status page (its port from the log in `errFile`) until `condition` holds for /status.json.
bool statusShows(const std::string& errFile, const std::function<bool(const std::string&)>& condition,
                 std::chrono::milliseconds timeout) {
  return waitUntil(
      [&] {
        std::smatch port;
        const std::string err = test::readFile(errFile);
        if (!std::regex_search(err, port, std::regex(R"(status page on http://127\.0\.0\.1:(\d+)/)"))) return false;
        auto r =
            test::runProcess("/usr/bin/curl", {"-s", "http://127.0.0.1:" + port[1].str() + "/status.json"}, {}, 10s);
        return r.exitCode == 0 && condition(r.output);
      },
      timeout);
}

TEST(DropIn, AReaderThatStartsLateGetsEveryLineAndTheWorkersWaitForIt) {
  // Two ranks print 12 MB between them, more than ddprun's console holds (4 MiB); the reader starts only once
  // ddprun says it holds their output back. Every line arrives, in order per rank, and the ranks, kept waiting
  // longer than the hang timeout while they report progress, are not taken for hung.
  const std::string dir = test::makeTempDir("late");
  const std::string chatty = writeScript(dir, "chatty.py",
                                         "import os, pathlib, sys\n"
                                         "progress = pathlib.Path(os.environ['DDPRUN_PROGRESS_FILE'])\n"
                                         "rank = os.environ['RANK']\n"
                                         "for i in range(150000):\n"
                                         "    if i % 1000 == 0: progress.write_text(f'{i // 1000}\\n')\n"
                                         "    sys.stdout.write(f'{rank} line {i:06d} ' + 'z' * 20 + '\\n')\n");
  int readEnd = -1;
  const pid_t pid = spawnWithStuckStdout(
      {"--nproc-per-node", "2", "--standalone", "--status-port", "0", "--hang-min-timeout", "1", chatty}, dir + "/err",
      readEnd);
  EXPECT_TRUE(statusShows(
      dir + "/err", [](const std::string& json) { return json.find("\"output_held\":true") != std::string::npos; },
      60s))
      << test::readFile(dir + "/err");
  // Longer than the 1 s hang floor with the ranks held back, and the page says why they wait.
  EXPECT_TRUE(statusShows(
      dir + "/err", [](const std::string& json) { return json.find("\"output_held\":true") != std::string::npos; },
      5s));
  const std::string out = readAll(readEnd);
  const int status = waitFor(pid, 60s);
  const std::string err = test::readFile(dir + "/err");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << "\n" << err;
  EXPECT_EQ(err.find("hang:"), std::string::npos) << err;
  EXPECT_EQ(err.find("dropped"), std::string::npos) << err;
  for (const std::string rank : {"0", "1"}) {
    EXPECT_EQ(countOf(out, "[rank" + rank + "]:" + rank + " line "), 150000u) << "rank " << rank;
    EXPECT_NE(out.find("[rank" + rank + "]:" + rank + " line 149999 "), std::string::npos);
    EXPECT_LT(out.find("[rank" + rank + "]:" + rank + " line 000000 "),
              out.find("[rank" + rank + "]:" + rank + " line 149999 "));
  }
  ::close(readEnd);
  fs::remove_all(dir);
}

TEST(DropIn, WithTeeTheFileGetsEverythingWhileTheConsoleIsStuck) {
  // --tee: the workers never wait for the console; the file has all their lines while nobody reads the console,
  // and the console catches up from the file once it reads.
  const std::string dir = test::makeTempDir("teefile");
  int readEnd = -1;
  const pid_t pid = spawnWithStuckStdout({"--nproc-per-node", "1", "--standalone", "--tee", "1", "--log-dir",
                                          dir + "/logs", "sh", "-c", "yes 'a line of tee output' | head -n 400000"},
                                         dir + "/err", readEnd);
  std::string logFile;
  EXPECT_TRUE(waitUntil(
      [&] {
        std::error_code missing;  // the log directory appears once ddprun has started
        for (const auto& entry : fs::recursive_directory_iterator(dir + "/logs", missing)) {
          if (entry.path().filename() == "stdout.log" && fs::file_size(entry.path()) == 400000u * 21) {
            logFile = entry.path().string();
            return true;
          }
        }
        return false;
      },
      60s))
      << "the file should be complete before the console reads anything\n"
      << test::readFile(dir + "/err");
  const std::string out = readAll(readEnd);
  const int status = waitFor(pid, 60s);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << test::readFile(dir + "/err");
  EXPECT_EQ(countOf(out, "[rank0]:a line of tee output\n"), 400000u);
  ::close(readEnd);
  fs::remove_all(dir);
}

TEST(DropIn, ARankHostingItsOwnStoreOnMasterPortIsToldAboutNoAgentStore) {
  // A torch 1.13 script whose rank 0 starts its own TCPStore server on MASTER_PORT, where ddprun's agent store
  // listens: "errno: 98 - Address already in use". The summary says what to do; with --no-agent-store it runs.
  const std::string dir = test::makeTempDir("ownstore");
  const std::string script =
      writeScript(dir, "own_store.py",
                  "import os\n"
                  "from datetime import timedelta\n"
                  "import torch.distributed as dist\n"
                  "store = dist.TCPStore(os.environ['MASTER_ADDR'], int(os.environ['MASTER_PORT']),"
                  " 1, True, timedelta(seconds=10))\n"
                  "store.set('k', 'v')\n"
                  "print('own store', store.get('k'), flush=True)\n");
  const std::map<std::string, std::string> env{{"PYTHON_EXEC", test::pythonExe()}};
  auto r = test::runProcess(kDdprun, {"--nproc-per-node", "1", "--standalone", script}, env, 120s);
  EXPECT_EQ(r.exitCode, 1) << r.output;
  EXPECT_NE(r.output.find("hint      : its stderr says an address was already in use"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--no-agent-store"), std::string::npos) << r.output;
  auto ok = test::runProcess(kDdprun, {"--nproc-per-node", "1", "--standalone", "--no-agent-store", script}, env, 120s);
  EXPECT_EQ(ok.exitCode, 0) << ok.output;
  EXPECT_NE(ok.output.find("own store b'v'"), std::string::npos) << ok.output;
  fs::remove_all(dir);
}

TEST(DropIn, AReaderThatStartsLongAfterTheJobEndedGetsEveryByte) {
  // `ddprun … | less` left on its first page: the job ends while the console holds most of its output. As under
  // torchrun, ddprun waits for the reader, however long (here well past the 5 s it once gave up after), and every
  // line arrives; nothing is saved aside.
  const std::string dir = test::makeTempDir("latereader");
  int readEnd = -1;
  const pid_t pid = spawnWithStuckStdout(
      {"--standalone", "--log-dir", dir + "/logs", "sh", "-c", "seq -f 'later %07g' 150000"}, dir + "/err", readEnd);
  ASSERT_TRUE(
      waitUntil([&] { return test::readFile(dir + "/err").find("all workers exited 0") != std::string::npos; }, 60s))
      << test::readFile(dir + "/err");
  // The reader is away for 8 s after the job's end, seen above. A deliberate delay, kept: time passing while nobody
  // reads is the behaviour under test (ddprun once gave up after 5 s), not a guess about readiness.
  std::this_thread::sleep_for(8s);
  int status = 0;
  EXPECT_EQ(::waitpid(pid, &status, WNOHANG), 0) << "ddprun gave up on its reader\n" << test::readFile(dir + "/err");
  const std::string out = readAll(readEnd);
  status = waitFor(pid, 30s);
  const std::string err = test::readFile(dir + "/err");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << "\n" << err;
  EXPECT_EQ(err.find("console-unshown"), std::string::npos) << err;
  EXPECT_EQ(countOf(out, "[rank0]:later "), 150000u);
  EXPECT_NE(out.find("[rank0]:later 0150000\n"), std::string::npos);
  ::close(readEnd);
  fs::remove_all(dir);
}

TEST(DropIn, AStuckConsoleAtTheEndOfASignalledJobLeavesItsOutputInAFile) {
  const std::string dir = test::makeTempDir("unshown");
  int readEnd = -1;
  // Numbered lines: SIGTERM also ends seq wherever it is, so what it wrote is a prefix of them.
  const pid_t pid = spawnWithStuckStdout({"--standalone", "--status-port", "0", "--log-dir", dir + "/logs", "sh", "-c",
                                          "seq -f 'unread %07g' 1000000; exec sleep 600"},
                                         dir + "/err", readEnd);
  ASSERT_TRUE(statusShows(
      dir + "/err", [](const std::string& json) { return json.find("\"output_held\":true") != std::string::npos; },
      60s))
      << test::readFile(dir + "/err");
  const auto signalled = std::chrono::steady_clock::now();
  ::kill(pid, SIGTERM);
  const int status = waitFor(pid, 30s);
  EXPECT_LT(std::chrono::steady_clock::now() - signalled, 10s);
  const std::string err = test::readFile(dir + "/err");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGTERM) << status << "\n" << err;
  std::smatch saved;
  ASSERT_TRUE(std::regex_search(err, saved, std::regex(R"(bytes of output: they are in (\S+console-unshown\.log))")))
      << err;
  // What the console took, then what was saved, is every line seq wrote, in order, none twice or missing.
  ::fcntl(readEnd, F_SETFL, O_NONBLOCK);
  const std::string shown = readAll(readEnd);
  const std::string kept = test::readFile(saved[1].str());
  std::istringstream lines(shown + kept);
  std::string line;
  int expected = 1;
  while (std::getline(lines, line)) {
    char want[64];
    std::snprintf(want, sizeof want, "[rank0]:unread %07d", expected);
    if (line != want) {
      EXPECT_TRUE(lines.peek() == EOF && std::string(want).rfind(line, 0) == 0) << "line " << expected << ": " << line;
      break;
    }
    ++expected;
  }
  EXPECT_GT(expected, 20000) << "more than the console's pipe holds was written before the signal";
  EXPECT_GT(kept.size(), 0u);
  ::close(readEnd);
  fs::remove_all(dir);
}

TEST(DropIn, EndlessLinesDoNotGrowDdprun) {
  // 200 MB without a newline to the console (and 200 MB more with --tee to a file).
  const std::string dir = test::makeTempDir("endless");
  const std::string cmd = "exec '" + kDdprun + "' --standalone --tee 1 --log-dir '" + dir +
                          "' sh -c \"head -c 200000000 /dev/zero | tr '\\\\000' x; sleep 1\" > /dev/null";
  test::ChildProcess child("/bin/sh", {"-c", cmd}, {});
  long peakKb = 0;
  // Its peak RSS (VmHWM only grows) read until it ends: the last reading before the end is the one that counts.
  EXPECT_TRUE(waitUntil(
      [&] {
        std::ifstream status("/proc/" + std::to_string(child.pid()) + "/status");
        for (std::string line; std::getline(status, line);) {
          if (line.rfind("VmHWM:", 0) == 0) peakKb = std::max(peakKb, std::atol(line.c_str() + 6));
        }
        return !child.running();
      },
      120s))
      << "ddprun did not end";
  auto r = child.wait(10s);
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_GT(peakKb, 0);
  EXPECT_LT(peakKb, 64 * 1024) << "ddprun's peak RSS grew with the line";
  // The file got everything.
  std::uintmax_t bytes = 0;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (entry.path().filename() == "stdout.log") bytes = entry.file_size();
  }
  EXPECT_EQ(bytes, 200000000u);
  fs::remove_all(dir);
}

// --- the right Python ---------------------------------------------------------------------------------------

TEST(DropIn, APythonProgramWithoutPySuffixRunsUnderTheChosenPython) {
  const std::string dir = test::makeTempDir("nosuffix");
  const std::string script =
      writeScript(dir, "train", "import torch, sys\nprint('torch', torch.__version__, sys.executable)\n");
  auto r = ddprun({"--standalone", script});
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_NE(r.output.find("[rank0]:torch "), std::string::npos) << r.output;
  // An interpreter without torch: one line before the workers start, naming it and the fix.
  const std::string bare = writeScript(dir, "python", "#!/bin/sh\nexec " + test::pythonExe() + " -I -S \"$@\"\n");
  fs::permissions(bare, fs::perms::owner_all);
  auto missing = test::runProcess(kDdprun, {"--standalone", script}, {{"PYTHON_EXEC", bare}}, 60s);
  EXPECT_EQ(missing.exitCode, 1) << missing.output;
  const auto hint = missing.output.find("cannot find the torch module");
  ASSERT_NE(hint, std::string::npos) << missing.output;
  EXPECT_NE(missing.output.find("PYTHON_EXEC", hint), std::string::npos) << missing.output;
  EXPECT_LT(hint, missing.output.find("started 1 worker ")) << missing.output;
  fs::remove_all(dir);
}

// --- logs -----------------------------------------------------------------------------------------------------

std::vector<std::string> runDirs(const std::string& logDir) {
  std::vector<std::string> runs;
  for (const auto& entry : fs::directory_iterator(logDir)) runs.push_back(entry.path().string());
  return runs;
}

TEST(DropIn, TwoJobsSharingALogDirAndRunIdKeepTheirOwnLogsAndErrors) {
  const std::string logs = test::makeTempDir("shared");
  const std::string dir = test::makeTempDir("jobs");
  const std::string a = writeScript(dir, "a.py", "import time\nprint('job A'); time.sleep(2); print('A done')\n");
  const std::string b = writeScript(dir, "b.py",
                                    "from torch.distributed.elastic.multiprocessing.errors import record\n"
                                    "@record\ndef main():\n    raise RuntimeError('job B broke')\nmain()\n");
  const std::vector<std::string> common{"--rdzv-id",   "same", "--log-dir",     logs,
                                        "--redirects", "3",    "--master-port", "0"};
  std::vector<std::string> argsA = common, argsB = common;
  argsA.push_back(a);
  argsB.push_back(b);
  test::ChildProcess jobA(kDdprun, argsA, pythonEnv());
  ASSERT_TRUE(test::waitUntil([&] { return runDirs(logs).size() == 1; }, 60s))
      << jobA.outputSoFar();  // A's run is under way
  auto rb = ddprun(argsB);
  auto ra = jobA.wait(60s);
  EXPECT_EQ(ra.exitCode, 0) << ra.output;
  EXPECT_EQ(rb.exitCode, 1) << rb.output;
  EXPECT_NE(rb.output.find("RuntimeError: job B broke"), std::string::npos) << rb.output;
  const auto runs = runDirs(logs);
  ASSERT_EQ(runs.size(), 2u);
  std::string outputs;
  for (const auto& run : runs) {
    EXPECT_EQ(fs::path(run).filename().string().rfind("same_", 0), 0u) << run;
    outputs += test::readFile(run + "/attempt_0/0/stdout.log") + test::readFile(run + "/attempt_0/0/error.json");
  }
  EXPECT_NE(outputs.find("job A\nA done\n"), std::string::npos) << outputs;
  EXPECT_NE(outputs.find("job B broke"), std::string::npos) << outputs;
  fs::remove_all(logs);
  fs::remove_all(dir);
}

TEST(DropIn, ATemporaryLogDirIsKeptWhenOutputWasRedirectedAndGoesOtherwise) {
  const std::string tmp = test::makeTempDir("tmpdir");
  auto kept = ddprun({"--standalone", "--redirects", "3", "sh", "-c", "echo kept-output"}, {{"TMPDIR", tmp}});
  ASSERT_EQ(kept.exitCode, 0) << kept.output;
  std::smatch where;
  ASSERT_TRUE(std::regex_search(kept.output, where, std::regex("worker logs \\(--redirects/--tee\\) go to (\\S+)")))
      << kept.output;
  EXPECT_EQ(test::readFile(where[1].str() + "/attempt_0/0/stdout.log"), "kept-output\n");
  EXPECT_EQ(kept.output.find("kept-output"), std::string::npos) << "redirected, so not on the console";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  auto quiet = ddprun({"--standalone", "sh", "-c", "echo shown"}, {{"TMPDIR", tmp}});
  ASSERT_EQ(quiet.exitCode, 0) << quiet.output;
  // A successful run without redirects leaves only its report.
  std::set<std::string> left;
  for (const auto& entry : fs::recursive_directory_iterator(tmp)) {
    if (entry.is_regular_file()) left.insert(entry.path().filename().string());
  }
  EXPECT_EQ(left, (std::set<std::string>{"attempts.jsonl", "report.html", "status.json"}));
  std::smatch report;
  ASSERT_TRUE(std::regex_search(quiet.output, report, std::regex("run report: (\\S+)"))) << quiet.output;
  EXPECT_TRUE(fs::exists(report[1].str())) << quiet.output;
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  auto failed = ddprun({"--nproc-per-node", "2", "--standalone", "sh", "-c", "exit 4"}, {{"TMPDIR", tmp}});
  ASSERT_EQ(failed.exitCode, 1) << failed.output;
  for (const auto& entry : fs::recursive_directory_iterator(tmp)) {
    if (entry.is_directory()) {
      EXPECT_FALSE(fs::is_empty(entry.path())) << entry.path() << " left empty";
    }
  }
  fs::remove_all(tmp);
}

/// The JSON lines of `output` ("rank/stream/i" of each, by rank), each after a "[rank<N>]:" prefix when `prefixed`;
/// `broken` counts the lines that hold a piece of one (cut, or mixed with another).
std::map<int, std::vector<std::string>> jsonLinesOf(const std::string& output, bool prefixed, size_t* broken) {
  std::map<int, std::vector<std::string>> ids;
  std::istringstream in(output);
  const std::regex prefix(R"(^\[rank\d+\]:\{)");
  for (std::string line; std::getline(in, line);) {
    const bool marked = line.find("[ddprun: line continues]") != std::string::npos;
    const bool json = prefixed ? std::regex_search(line.substr(0, 16), prefix) : line.rfind('{', 0) == 0;
    if (!json) {
      if (line.find("{\"rank\"") != std::string::npos || (marked && line.find("zzz") == std::string::npos)) ++*broken;
      continue;
    }
    try {
      const auto parsed = nlohmann::json::parse(line.substr(line.find('{')));
      const int rank = parsed["rank"].get<int>();
      ids[rank].push_back(std::to_string(rank) + "/" + parsed["stream"].get<std::string>() + "/" +
                          std::to_string(parsed["i"].get<int>()));
    } catch (const std::exception&) {
      ++*broken;
    }
  }
  return ids;
}

TEST(DropIn, LongLinesFromManyRanksAtOnceArriveWholeOnTheConsoleAndInTheTeeFiles) {
  // Four ranks each print 300 JSON lines of 20 KB to stdout and 300 to stderr at once (Python's buffered pipes cut
  // them anywhere), ddprun's stdout and stderr one file (2>&1); then lines of exactly 1 MiB, and one just over it,
  // which is shown in marked pieces. Every line up to 1 MiB must arrive whole, on the console and in the --tee files.
  const std::string dir = test::makeTempDir("longlines");
  const std::string script =
      writeScript(dir, "long.py",
                  "import json, os, sys\n"
                  "rank = int(os.environ['RANK'])\n"
                  "pad = 'x' * 20000\n"
                  "for i in range(300):\n"
                  "    for stream, out in (('out', sys.stdout), ('err', sys.stderr)):\n"
                  "        print(json.dumps({'rank': rank, 'stream': stream, 'i': i, 'pad': pad}),"
                  " file=out)\n"
                  "mib = 1 << 20\n"
                  "for i in range(300, 302):\n"
                  "    line = json.dumps({'rank': rank, 'stream': 'out', 'i': i, 'pad': ''})\n"
                  "    print(line[:-2] + 'y' * (mib - len(line)) + line[-2:])\n"
                  "print('z' * (mib + 10))\n");
  const std::string console = dir + "/console.txt";
  auto r = test::runProcess("/bin/sh",
                            {"-c", "exec '" + kDdprun + "' --nproc-per-node 4 --standalone --tee 3 --log-dir '" + dir +
                                       "/logs' '" + script + "' > '" + console + "' 2>&1"},
                            pythonEnv(), 120s);
  ASSERT_EQ(r.exitCode, 0) << r.output << test::readFile(console).substr(0, 2000);
  const std::string out = test::readFile(console);
  size_t broken = 0;
  auto byRank = jsonLinesOf(out, true, &broken);
  EXPECT_EQ(broken, 0u) << "lines cut or mixed on the console";
  for (int rank = 0; rank < 4; ++rank) {
    const auto& ids = byRank[rank];
    EXPECT_EQ(ids.size(), 602u) << "rank " << rank;
    EXPECT_EQ(std::set<std::string>(ids.begin(), ids.end()).size(), 602u) << "rank " << rank;
    // The line over 1 MiB: one piece of 1 MiB, marked, then the rest.
    const std::string zPrefix = "[rank" + std::to_string(rank) + "]:" + std::string(1 << 20, 'z');
    EXPECT_NE(out.find(zPrefix + " [ddprun: line continues]\n[rank" + std::to_string(rank) + "]:zzzzzzzzzz\n"),
              std::string::npos)
        << "rank " << rank;
  }
  // The --tee files: each rank's own streams, every line whole.
  size_t teeLines = 0;
  for (const auto& entry : fs::recursive_directory_iterator(dir + "/logs")) {
    const std::string name = entry.path().filename();
    if (name != "stdout.log" && name != "stderr.log") continue;
    size_t cut = 0;
    for (const auto& [rank, ids] : jsonLinesOf(test::readFile(entry.path()), false, &cut)) teeLines += ids.size();
    EXPECT_EQ(cut, 0u) << entry.path();
  }
  EXPECT_EQ(teeLines, 4u * 602);
  fs::remove_all(dir);
}

// --- the failure summary ----------------------------------------------------------------------------------------

TEST(DropIn, TheSummaryShowsTheWholeTracebackFromTheErrorFile) {
  const std::string dir = test::makeTempDir("trace");
  const std::string script = writeScript(dir, "deep.py",
                                         "from torch.distributed.elastic.multiprocessing.errors import record\n"
                                         "def load_batch():\n    raise ValueError('bad batch')\n"
                                         "def train_step():\n    load_batch()\n"
                                         "@record\ndef main():\n    train_step()\n"
                                         "main()\n");
  auto r = ddprun({"--standalone", script});
  EXPECT_EQ(r.exitCode, 1) << r.output;
  const auto tb = r.output.find("traceback : Traceback (most recent call last):");
  ASSERT_NE(tb, std::string::npos) << r.output;
  const auto inner = r.output.find("in load_batch", tb);
  EXPECT_NE(inner, std::string::npos) << r.output;
  EXPECT_NE(r.output.find("in train_step", tb), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\n      raise ValueError('bad batch')", tb), std::string::npos)
      << "indented under the field\n"
      << r.output;
  EXPECT_NE(r.output.find("message   : ValueError: bad batch"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("FAILED (role default)"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

/// The part of a failure summary from "Root Cause" on.
std::string rootCauseOf(const std::string& output) {
  const auto root = output.find("Root Cause (first observed failure):");
  return root == std::string::npos ? "" : output.substr(root);
}

TEST(DropIn, ARankWithoutAnErrorFileHasItsOwnLastErrorInTheSummaryTheStatusAndTheReport) {
  // A stock script without @record (no error file): rank 1's traceback went by on the console; the summary, the
  // run's status.json and report.html and a file in the attempt directory keep it.
  const std::string logs = test::makeTempDir("tail");
  auto r = ddprun({"--nproc-per-node", "2", "--standalone", "--log-dir", logs,
                   kSource + "/tests/scripts/failing_rank.py", "exception"});
  EXPECT_EQ(r.exitCode, 1) << r.output;
  const std::string root = rootCauseOf(r.output);
  EXPECT_NE(root.find("rank      : 1 (local_rank: 1)"), std::string::npos) << r.output;
  EXPECT_NE(root.find("message   : KeyError: 'labels'"), std::string::npos) << r.output;
  EXPECT_NE(root.find("traceback : Traceback (most recent call last):"), std::string::npos) << r.output;
  EXPECT_NE(root.find("in load_batch"), std::string::npos) << r.output;
  EXPECT_EQ(root.find("To enable traceback"), std::string::npos) << r.output;
  std::string run;
  for (const auto& entry : fs::directory_iterator(logs)) run = entry.path().string();
  const std::string saved = test::readFile(run + "/attempt_0/1/stderr_tail.txt");
  EXPECT_NE(saved.find("Traceback (most recent call last):"), std::string::npos) << saved;
  EXPECT_NE(saved.find("KeyError: 'labels'"), std::string::npos) << saved;
  const auto status = nlohmann::json::parse(test::readFile(run + "/status.json"));
  const auto& culprit = status["attempts"].back()["culprits"].front();
  EXPECT_EQ(culprit["rank"], 1) << culprit;
  EXPECT_EQ(culprit["message"], "KeyError: 'labels'") << culprit;
  EXPECT_NE(culprit["traceback"].get<std::string>().find("in load_batch"), std::string::npos) << culprit;
  EXPECT_EQ(culprit["stderr_tail"], run + "/attempt_0/1/stderr_tail.txt") << culprit;
  EXPECT_NE(status["last_failure"].get<std::string>().find("KeyError: 'labels'"), std::string::npos);
  EXPECT_NE(test::readFile(run + "/report.html").find("in load_batch"), std::string::npos);
  fs::remove_all(logs);
}

TEST(DropIn, ASysExitASegfaultInterleavedOutputAndAMegabyteBeforeFailingEachKeepTheRanksOwnLastError) {
  struct Case {
    std::string mode, expect, unexpected;
  };
  const std::vector<Case> cases = {
      {"exit3", "message   : fatal: the config names no optimizer", ""},
      {"segfault", "Fatal Python error: Segmentation fault", ""},
      {"interleaved", "message   : KeyError: 'labels'", "rank 0 warming up"},
      {"megabyte", "message   : KeyError: 'labels'", "xxxxxxxxxx\n"},
  };
  for (const auto& c : cases) {
    auto r = ddprun({"--nproc-per-node", "2", "--standalone", kSource + "/tests/scripts/failing_rank.py", c.mode},
                    {{"PYTHONFAULTHANDLER", "1"}});
    EXPECT_EQ(r.exitCode, 1) << c.mode << "\n" << r.output;
    const std::string root = rootCauseOf(r.output);
    EXPECT_NE(root.find("rank      : 1 (local_rank: 1)"), std::string::npos) << c.mode << "\n" << r.output;
    EXPECT_NE(root.find(c.expect), std::string::npos) << c.mode << "\n" << r.output;
    if (!c.unexpected.empty()) {
      EXPECT_EQ(root.find(c.unexpected), std::string::npos) << c.mode << "\n" << root;
    }
    EXPECT_LT(root.size(), 12u * 1024) << c.mode << ": the summary's record is bounded";
  }
  auto segfault =
      ddprun({"--nproc-per-node", "2", "--standalone", kSource + "/tests/scripts/failing_rank.py", "segfault"});
  EXPECT_NE(rootCauseOf(segfault.output).find("traceback : about to read a NULL pointer"), std::string::npos)
      << "without faulthandler, its last line\n"
      << segfault.output;
}

/// Two busy loops per core while it lives: the loaded machine a test must pass on.
class BusyLoops {
 public:
  BusyLoops() {
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned i = 0; i < 2 * cores; ++i)
      loops_.emplace_back("/bin/sh", std::vector<std::string>{"-c", "while :; do :; done"},
                          std::map<std::string, std::string>{});
  }

 private:
  std::vector<test::ChildProcess> loops_;  // killed with them
};

TEST(DropIn, ARankThatExitsZeroIsNeverAFailureWhenItsPeerFailsOfItsOwnError) {
  // Rank 0 prints "rank 0 ok" and exits 0; rank 1 raises a KeyError of its own once rank 0 has gone (the order that
  // listed rank 0 under Failures and called it the likely cause). 50 runs in a row with two busy loops per core;
  // two with @record (python3-torch: an error file), the others without (the end of rank 1's stderr).
  const std::string dir = test::makeTempDir("exit0");
  const std::string script = writeScript(dir, "exit0.py",
                                         "import os, sys, time\n"
                                         "record = lambda f: f\n"
                                         "if sys.argv[1] == 'record':\n"
                                         "    from torch.distributed.elastic.multiprocessing.errors import record\n"
                                         "@record\ndef main():\n"
                                         "    gone = os.path.join(sys.argv[2], 'rank0-gone-' + sys.argv[3])\n"
                                         "    if os.environ['RANK'] == '0':\n"
                                         "        print('rank 0 ok', flush=True)\n"
                                         "        open(gone, 'w').close()\n"
                                         "        return\n"
                                         "    while not os.path.exists(gone):\n"
                                         "        time.sleep(0.001)\n"
                                         "    time.sleep(0.05)\n"
                                         "    {}['labels']\n"
                                         "main()\n");
  BusyLoops load;
  for (int run = 0; run < 50; ++run) {
    const std::string mode = run % 25 == 0 ? "record" : "plain";
    auto r = ddprun({"--nproc-per-node", "2", "--standalone", script, mode, dir, std::to_string(run)}, {}, 120s);
    ASSERT_EQ(r.exitCode, 1) << "run " << run << "\n" << r.output;
    ASSERT_NE(r.output.find("[rank0]:rank 0 ok"), std::string::npos) << "run " << run << "\n" << r.output;
    const std::string root = rootCauseOf(r.output);
    ASSERT_NE(root.find("rank      : 1 (local_rank: 1)"), std::string::npos) << "run " << run << "\n" << r.output;
    ASSERT_NE(root.find("KeyError: 'labels'"), std::string::npos) << "run " << run << "\n" << r.output;
    ASSERT_NE(r.output.find("<NO_OTHER_FAILURES>"), std::string::npos) << "run " << run << "\n" << r.output;
    ASSERT_EQ(r.output.find("rank      : 0 (local_rank: 0)"), std::string::npos) << "run " << run << "\n" << r.output;
    ASSERT_EQ(r.output.find("likely cause"), std::string::npos) << "run " << run << "\n" << r.output;
    ASSERT_EQ(r.output.find("Likely cause"), std::string::npos) << "run " << run << "\n" << r.output;
  }
  // A rank 0 that outlives its peers to save the final model is not warned about.
  const std::string save = writeScript(dir, "save.py",
                                       "import os, time\n"
                                       "if os.environ['RANK'] == '0':\n"
                                       "    time.sleep(2.5)\n"
                                       "    print('rank 0 saved the model', flush=True)\n");
  auto saved = ddprun({"--nproc-per-node", "2", "--standalone", save});
  EXPECT_EQ(saved.exitCode, 0) << saved.output;
  EXPECT_EQ(saved.output.find("[warning]"), std::string::npos) << saved.output;
  fs::remove_all(dir);
}

TEST(DropIn, EveryRankThatFailedOnItsOwnIsListedEveryTime) {
  // Both ranks raise at the same moment (once both have imported torch); whichever exit ddprun sees
  // first, the other is no "stopped by us".
  const std::string dir = test::makeTempDir("both");
  const std::string script = writeScript(dir, "both.py",
                                         "import os, sys, time\n"
                                         "from torch.distributed.elastic.multiprocessing.errors import record\n"
                                         "@record\ndef main():\n"
                                         "    run, rank = sys.argv[1], os.environ['RANK']\n"
                                         "    open(f'" +
                                             dir +
                                             "/ready-{run}-{rank}', 'w').close()\n"
                                             "    while not all(os.path.exists(f'" +
                                             dir +
                                             "/ready-{run}-{r}') for r in '01'):\n"
                                             "        time.sleep(0.001)\n"
                                             "    raise RuntimeError('rank ' + rank + ' failed')\n"
                                             "main()\n");
  for (int run = 0; run < 5; ++run) {
    auto r = ddprun({"--nproc-per-node", "2", "--standalone", script, std::to_string(run)});
    EXPECT_EQ(r.exitCode, 1) << r.output;
    EXPECT_EQ(r.output.find("<NO_OTHER_FAILURES>"), std::string::npos) << "run " << run << "\n" << r.output;
    EXPECT_NE(r.output.find("RuntimeError: rank 0 failed"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("RuntimeError: rank 1 failed"), std::string::npos) << r.output;
  }
  fs::remove_all(dir);
}

TEST(DropIn, AMissingScriptIsReportedForEveryRankEveryTime) {
  // Both ranks fail at start-up within a few ms of each other: the summary must list both, every time (it once
  // listed one rank and <NO_OTHER_FAILURES> in 2 runs of 8).
  const std::string dir = test::makeTempDir("missing");
  for (int run = 0; run < 8; ++run) {
    auto r = ddprun({"--nproc-per-node", "2", "--standalone", dir + "/no_such_script.py"});
    EXPECT_EQ(r.exitCode, 1) << r.output;
    EXPECT_EQ(r.output.find("<NO_OTHER_FAILURES>"), std::string::npos) << "run " << run << "\n" << r.output;
    EXPECT_NE(r.output.find("rank      : 0 (local_rank: 0)"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("rank      : 1 (local_rank: 1)"), std::string::npos) << r.output;
  }
  fs::remove_all(dir);
}

TEST(DropIn, TheRootCauseIsTheEarliestErrorEvenWhenThatRankIsStillExiting) {
  // Rank 0 records "No space left on device" and then takes its time to exit (atexit); rank 1 fails
  // later with the consequence, and its exit reaches ddprun first. Rank 0's SIGTERM arrives after its
  // error file: it failed on its own, and it is the root cause.
  const std::string dir = test::makeTempDir("root");
  const std::string script = writeScript(dir, "disk.py",
                                         "import atexit, os, time\n"
                                         "from torch.distributed.elastic.multiprocessing.errors import record\n"
                                         "@record\ndef main():\n"
                                         "    if os.environ['RANK'] == '0':\n"
                                         "        atexit.register(time.sleep, 30)\n"
                                         "        raise OSError(28, 'No space left on device')\n"
                                         "    time.sleep(1.0)\n"
                                         "    raise ConnectionError('Connection closed by peer')\n"
                                         "main()\n");
  auto r = ddprun({"--nproc-per-node", "2", "--standalone", "--stop-timeout", "5", script});
  EXPECT_EQ(r.exitCode, 1) << r.output;
  const auto root = r.output.find("Root Cause (first observed failure):");
  ASSERT_NE(root, std::string::npos) << r.output;
  EXPECT_NE(r.output.find("No space left on device", root), std::string::npos) << r.output;
  const auto others = r.output.find("Failures:");
  EXPECT_NE(r.output.substr(others, root - others).find("Connection closed by peer"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

TEST(DropIn, ExitcodeKeepsTorchrunsFormBesideTheSignalName) {
  auto r = ddprun({"--standalone", "sh", "-c", "kill -9 $$"});
  EXPECT_EQ(r.exitCode, 1) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("exitcode  : -9 \\(pid: \\d+\\) SIGKILL"))) << r.output;
  EXPECT_NE(r.output.find("traceback : Signal 9 (SIGKILL) received by PID"), std::string::npos) << r.output;
}

// --- torchrun's command lines and environment ---------------------------------------------------------------

TEST(DropIn, TorchrunCommandLinesWork) {
  // --nproc (argparse prefix), --start-method (noted once), --rdzv-conf timeout.
  auto r = ddprun({"--nproc", "2", "--start-method", "spawn", "--standalone", "sh", "-c", "echo w=$WORLD_SIZE"});
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_NE(r.output.find("[rank1]:w=2"), std::string::npos) << r.output;
  auto fork = ddprun({"--start_method", "fork", "--standalone", "true"});
  EXPECT_EQ(fork.exitCode, 0) << fork.output;
  EXPECT_NE(fork.output.find("--start-method fork"), std::string::npos) << fork.output;
  auto ambiguous = ddprun({"--n", "2", "true"});
  EXPECT_EQ(ambiguous.exitCode, 2) << ambiguous.output;
  EXPECT_NE(ambiguous.output.find("ambiguous option: --n could match"), std::string::npos) << ambiguous.output;
}

TEST(DropIn, Torchrun2CommandLinesWork) {
  const std::string dir = test::makeTempDir("torchrun2");
  // Every torchrun 2.x flag, and "--" before the program.
  auto r =
      ddprun({"--nproc-per-node",
              "2",
              "--standalone",
              "--shutdown-timeout",
              "5",
              "--signals-to-handle",
              "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1",
              "--numa-binding",
              "node",
              "--virtual-local-rank",
              "--duplicate-stdout-filters",
              "apple,orange,,pear",
              "--duplicate-stderr-filters",
              "",
              "--event-log-handler",
              "console",
              "--logs-specs",
              "DefaultLogsSpecs",
              "--log-dir",
              dir,
              "--",
              "sh",
              "-c",
              "echo local=$LOCAL_RANK cuda=$CUDA_VISIBLE_DEVICES; echo apple $RANK; echo banana; echo orange,pear"},
             {{"CUDA_VISIBLE_DEVICES", "3,5"}});
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_NE(r.output.find("[rank0]:local=0 cuda=3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[rank1]:local=0 cuda=5"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("event: {\"metadata\":{\"attempt\":0,\"ranks\":2},\"name\":\"ddprun.attempt.start\""),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("\"name\":\"ddprun.job.end\""), std::string::npos) << r.output;
  // Lines with "apple" or "orange,pear" (",," is a literal comma) from both ranks, nothing else.
  std::string filtered;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (entry.path().filename() == "filtered_stdout.log") filtered = test::readFile(entry.path().string());
  }
  EXPECT_EQ(countOf(filtered, "apple"), 2u) << filtered;
  EXPECT_EQ(countOf(filtered, "orange,pear"), 2u) << filtered;
  EXPECT_EQ(filtered.find("banana"), std::string::npos) << filtered;
  EXPECT_NE(filtered.find("[rank1]:apple 1\n"), std::string::npos) << filtered;
  // A single node without an endpoint's port, and HOST:0: a free port each, so two such jobs never collide.
  auto a = ddprun({"--nproc-per-node", "1", "sh", "-c", "echo port=$MASTER_PORT; sleep 0.3"});
  auto b = ddprun({"--nnodes", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0", "sh", "-c",
                   "echo port=$MASTER_PORT"});
  EXPECT_EQ(a.exitCode, 0) << a.output;
  EXPECT_EQ(b.exitCode, 0) << b.output;
  EXPECT_EQ(a.output.find("port=29500"), std::string::npos) << a.output;
  EXPECT_NE(a.output.find("a free port"), std::string::npos) << a.output;
  EXPECT_NE(b.output.find("store listening on 127.0.0.1:"), std::string::npos) << b.output;
  // Errors are one clear line: a custom LogsSpecs, a typo (with the nearest option), an unresolvable address.
  auto logsSpecs = ddprun({"--logs-specs", "my_plugin", "true"});
  EXPECT_EQ(logsSpecs.exitCode, 2);
  EXPECT_NE(logsSpecs.output.find("--logs-specs my_plugin: ddprun writes torchrun's default layout"), std::string::npos)
      << logsSpecs.output;
  auto typo = ddprun({"--nprco-per-node", "2", "true"});
  EXPECT_EQ(typo.exitCode, 2);
  EXPECT_NE(typo.output.find("did you mean --nproc-per-node?"), std::string::npos) << typo.output;
  auto unresolvable = ddprun({"--master-addr", "no-such-host.invalid", "true"});
  EXPECT_EQ(unresolvable.exitCode, 2);
  EXPECT_NE(unresolvable.output.find("--master-addr no-such-host.invalid: cannot resolve it"), std::string::npos)
      << unresolvable.output;
  fs::remove_all(dir);
}

TEST(DropIn, ASingleNodeJobOnAnEndpointListensOnLoopbackOnly) {
  const int port = test::freePort();
  const std::string p = std::to_string(port);
  auto r = ddprun({"--nnodes", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:" + p, "sh", "-c",
                   "ss -ltnH 'sport = :" + p + "' | sed 's/^/listening /'"});
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_NE(r.output.find("store listening on 127.0.0.1:" + p), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("127.0.0.1:" + p + " "), std::string::npos) << "the socket as the kernel shows it\n"
                                                                      << r.output;
  EXPECT_EQ(r.output.find("0.0.0.0:" + p + " "), std::string::npos) << r.output;
}

TEST(DropIn, SignalsToHandleForwardsSlurmsWarningAndNamesAnUnlistedSignal) {
  const std::string dir = test::makeTempDir("usr1");
  // The worker checkpoints on SIGUSR1 (Slurm's "time is nearly up") and finishes; the job ends with 0.
  const std::string script = writeScript(dir, "usr1.py",
                                         "import os, signal, sys, time, pathlib\n"
                                         "got = []\n"
                                         "signal.signal(signal.SIGUSR1, lambda *a: got.append(1))\n"
                                         "pathlib.Path(sys.argv[1] + '/ready' + os.environ['RANK']).write_text('')\n"
                                         "while not got: time.sleep(0.02)\n"
                                         "print('checkpointed on SIGUSR1', flush=True)\n");
  test::ChildProcess job(
      kDdprun, {"--nproc-per-node", "2", "--standalone", "--signals-to-handle", "SIGTERM,SIGINT,SIGUSR1", script, dir},
      pythonEnv());
  ASSERT_TRUE(waitUntil([&] { return fs::exists(dir + "/ready0") && fs::exists(dir + "/ready1"); }, 60s))
      << job.outputSoFar();
  job.sendSignal(SIGUSR1);
  auto r = job.wait(60s);
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_EQ(countOf(r.output, "checkpointed on SIGUSR1"), 2u) << r.output;
  EXPECT_NE(r.output.find("received SIGUSR1; forwarding it to the workers"), std::string::npos) << r.output;
  // SIGUSR2 is not listed: one line, the workers stopped, exit 128 + 12.
  fs::remove(dir + "/ready0");
  test::ChildProcess other(kDdprun, {"--standalone", "sh", "-c", "touch " + dir + "/ready0; exec sleep 600"}, {});
  ASSERT_TRUE(waitUntil([&] { return fs::exists(dir + "/ready0"); }, 60s)) << other.outputSoFar();
  other.sendSignal(SIGUSR2);
  auto o = other.wait(60s);
  EXPECT_EQ(o.exitCode, 128 + SIGUSR2) << o.output;
  EXPECT_NE(o.output.find("received SIGUSR2, which --signals-to-handle does not list"), std::string::npos) << o.output;
  fs::remove_all(dir);
}

TEST(DropIn, NumaBindingPutsEachRankOnItsNodesCpus) {
  // This machine's NUMA node(s) as sysfs shows them; --numa-binding node gives every rank its node's CPUs,
  // exclusive shares them out without overlap.
  const std::string nodeCpus = test::readFile("/sys/devices/system/node/node0/cpulist");
  if (nodeCpus.empty()) GTEST_SKIP() << "no NUMA information in sysfs";
  auto node = ddprun({"--nproc-per-node", "2", "--standalone", "--numa-binding", "node", "sh", "-c",
                      "grep Cpus_allowed_list /proc/self/status"});
  EXPECT_EQ(node.exitCode, 0) << node.output;
  const std::string trimmed = nodeCpus.substr(0, nodeCpus.find('\n'));
  EXPECT_EQ(countOf(node.output, "Cpus_allowed_list:\t" + trimmed + "\n"), 2u) << node.output;
  auto exclusive = ddprun({"--nproc-per-node", "2", "--standalone", "--numa-binding", "exclusive", "sh", "-c",
                           "grep Cpus_allowed_list /proc/self/status"});
  std::smatch first, second;
  ASSERT_TRUE(std::regex_search(exclusive.output, first, std::regex(R"(\[rank0\]:Cpus_allowed_list:\t(\S+))")))
      << exclusive.output;
  ASSERT_TRUE(std::regex_search(exclusive.output, second, std::regex(R"(\[rank1\]:Cpus_allowed_list:\t(\S+))")))
      << exclusive.output;
  if (trimmed != "0") {
    EXPECT_NE(first[1].str(), second[1].str()) << exclusive.output;
  }
  // Run on one CPU (taskset -c 1): the ranks stay on it, as torch 2.x keeps them within os.sched_getaffinity.
  if (::sysconf(_SC_NPROCESSORS_ONLN) < 2 || trimmed.find('-') == std::string::npos) return;
  auto pinned = test::runProcess("/usr/bin/taskset",
                                 {"-c", "1", kDdprun, "--nproc-per-node", "2", "--standalone", "--numa-binding", "node",
                                  "sh", "-c", "grep Cpus_allowed_list /proc/self/status"},
                                 {}, 60s);
  EXPECT_EQ(pinned.exitCode, 0) << pinned.output;
  EXPECT_EQ(countOf(pinned.output, "Cpus_allowed_list:\t1\n"), 2u) << pinned.output;
  EXPECT_NE(pinned.output.find("--numa-binding node: local rank 0 on CPUs 1, memory of node 0"), std::string::npos)
      << pinned.output;
}

TEST(DropIn, AFullWidthProgressBarStaysOnItsLineAndEachRankKeepsItsOwn) {
  // A real terminal (tmux, 80 columns): two ranks draw tqdm bars as wide as their terminal. Each rank's bar
  // stays on one screen line of its own: no wrapped lines, no empty prefixed lines.
  if (test::runProcess("/usr/bin/tmux", {"-V"}, {}, 10s).exitCode != 0) GTEST_SKIP() << "no tmux";
  const std::string dir = test::makeTempDir("bars");
  const std::string script = writeScript(dir, "bars.py",
                                         "import os, shutil, time\n"
                                         "from tqdm import tqdm\n"
                                         "print('width', shutil.get_terminal_size().columns, flush=True)\n"
                                         "for i in tqdm(range(30), mininterval=0):\n"
                                         "    time.sleep(0.05)\n");
  const std::string session = "ddprun-bars-" + std::to_string(::getpid());
  const std::string command = "PYTHON_EXEC=" + test::pythonExe() + " " + kDdprun + " --nproc-per-node 2 --standalone " +
                              script + " > /dev/tty 2>&1; touch " + dir + "/done; sleep 600";
  ASSERT_EQ(
      test::runProcess("/usr/bin/tmux", {"new-session", "-d", "-s", session, "-x", "80", "-y", "30", command}, {}, 10s)
          .exitCode,
      0);
  EXPECT_TRUE(waitUntil([&] { return fs::exists(dir + "/done"); }, 120s));
  const std::string screen = test::runProcess("/usr/bin/tmux", {"capture-pane", "-p", "-t", session}, {}, 10s).output;
  test::runProcess("/usr/bin/tmux", {"kill-session", "-t", session}, {}, 10s);
  EXPECT_EQ(countOf(screen, "[rank0]:width 72"), 1u) << "80 columns less the 8 of the prefix\n" << screen;
  EXPECT_EQ(countOf(screen, "[rank0]:100%"), 1u) << screen;
  EXPECT_EQ(countOf(screen, "[rank1]:100%"), 1u) << screen;
  std::istringstream lines(screen);
  int prefixed = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("[rank", 0) != 0) continue;
    ++prefixed;
    EXPECT_GT(line.size(), std::string("[rank0]:").size()) << "an empty prefixed line\n" << screen;
  }
  EXPECT_EQ(prefixed, 4) << "two width lines and one bar per rank, nothing wrapped or repeated\n" << screen;
  fs::remove_all(dir);
}

TEST(DropIn, PrefixTemplateRoleAndLogLevel) {
  auto r = ddprun({"--nproc-per-node", "2", "--standalone", "--role", "trainer", "sh", "-c", "echo hi"},
                  {{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "[${role_name}${local_rank}]:"}});
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_NE(r.output.find("[trainer1]:hi"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("role trainer"), std::string::npos) << r.output;
  auto quiet = ddprun({"--standalone", "sh", "-c", "echo hi"}, {{"LOGLEVEL", "WARNING"}});
  EXPECT_EQ(quiet.output.find("[info]"), std::string::npos) << quiet.output;
  auto debug = ddprun({"--standalone", "sh", "-c", "echo hi"}, {{"LOGLEVEL", "WARNING"}, {"DDPRUN_LOG_LEVEL", "info"}});
  EXPECT_NE(debug.output.find("[info]"), std::string::npos) << debug.output;
}

TEST(DropIn, StandaloneRunsGetAFreshRunId) {
  auto a = ddprun({"--standalone", "sh", "-c", "echo id=$TORCHELASTIC_RUN_ID"});
  auto b = ddprun({"--standalone", "sh", "-c", "echo id=$TORCHELASTIC_RUN_ID"});
  std::smatch ma, mb;
  ASSERT_TRUE(std::regex_search(a.output, ma, std::regex("id=([0-9a-f-]{36})"))) << a.output;
  ASSERT_TRUE(std::regex_search(b.output, mb, std::regex("id=([0-9a-f-]{36})"))) << b.output;
  EXPECT_NE(ma[1].str(), mb[1].str());
}

TEST(DropIn, AnIpv6MasterAddressWorksEndToEnd) {
  const int port = test::freePort();
  auto r = ddprun({"--nproc-per-node", "2", "--master-addr", "::1", "--master-port", std::to_string(port),
                   kSource + "/tests/scripts/stock_ddp.py"},
                  {}, 120s);
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_NE(r.output.find("store listening on ::1:"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace ddprun::launcher
