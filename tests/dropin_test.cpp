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

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <thread>

#include "support/child_process.hpp"
#include "support/pty_session.hpp"

extern char** environ;

namespace ddprun::launcher {
namespace fs = std::filesystem;
using namespace std::chrono_literals;
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

bool waitUntil(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

std::vector<int> pidsIn(const std::string& dir, int n) {
  std::vector<int> pids;
  for (int r = 0; r < n; ++r) pids.push_back(std::atoi(test::readFile(dir + "/pid" + std::to_string(r)).c_str()));
  return pids;
}

// --- terminal and output relay --------------------------------------------------------------------------------

TEST(DropIn, WorkersSeeATerminalWhenDdprunHasOneAndPipesOtherwise) {
  const std::vector<std::string> args{"--nproc-per-node", "2", "--standalone", test::pythonExe(), "-c",
                                      "import os; print('tty', os.isatty(1), os.isatty(2))"};
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
                                         "    while not os.path.exists(f'" + dir + "/go{i}'): time.sleep(0.02)\n");
  test::PtySession tty(kDdprun, {"--standalone", script}, pythonEnv());
  for (int i = 0; i < 3; ++i) {
    const std::string shown = "[rank0]:" + std::string(i < 1 ? "  0%" : i < 2 ? " 33%" : " 67%");
    ASSERT_TRUE(tty.waitFor(shown, 30s)) << "step " << i << " not on screen:\n" << tty.output();
    std::ofstream(dir + "/go" + std::to_string(i)) << "";
  }
  auto r = tty.wait(30s);
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_NE(r.output.find("\r[rank0]:100%"), std::string::npos) << r.output;
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

TEST(DropIn, CtrlZStopsTheWorkersAndContinuingResumesThem) {
  const std::string dir = test::makeTempDir("ctrlz");
  const std::string script = writeScript(dir, "tick.py",
                                         "import os, time\n"
                                         "open(f'" + dir + "/pid{os.environ[\"RANK\"]}', 'w').write(str(os.getpid()))\n"
                                         "while not os.path.exists('" + dir + "/stop'): time.sleep(0.05)\n");
  test::PtySession tty(kDdprun, {"--nproc-per-node", "2", "--standalone", script}, pythonEnv());
  ASSERT_TRUE(waitUntil([&] { return fs::exists(dir + "/pid0") && fs::exists(dir + "/pid1"); }, 60s));
  std::this_thread::sleep_for(100ms);  // both have written their whole pid
  const auto pids = pidsIn(dir, 2);
  tty.send("\x1a");  // Ctrl-Z at the terminal: SIGTSTP to ddprun's process group
  EXPECT_TRUE(waitUntil([&] { return test::processState(tty.pid()) == 'T'; }, 10s)) << tty.output();
  for (int pid : pids) EXPECT_TRUE(waitUntil([&] { return test::processState(pid) == 'T'; }, 10s)) << pid;
  ::kill(tty.pid(), SIGCONT);  // what fg or bg sends
  for (int pid : pids) EXPECT_TRUE(waitUntil([&] { return test::processState(pid) != 'T'; }, 10s)) << pid;
  EXPECT_TRUE(waitUntil([&] { return test::processState(tty.pid()) != 'T'; }, 10s));
  std::ofstream(dir + "/stop") << "";
  auto r = tty.wait(30s);
  EXPECT_EQ(r.exitCode, 0) << r.output;
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
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(20ms);
  }
  return status;
}

TEST(DropIn, AReaderThatStopsReadingNeverHoldsUpAFailureOrASignal) {
  const std::string dir = test::makeTempDir("stuck");
  // Rank 0 floods stdout; rank 1 fails after a second. Nobody reads ddprun's stdout.
  const std::string flood = writeScript(dir, "flood.py",
                                        "import os, sys, time\n"
                                        "if os.environ['RANK'] == '1':\n"
                                        "    time.sleep(1); sys.exit(3)\n"
                                        "line = 'x' * 999 + '\\n'\n"
                                        "while True: sys.stdout.write(line)\n");
  int readEnd = -1;
  const auto start = std::chrono::steady_clock::now();
  pid_t pid = spawnWithStuckStdout({"--nproc-per-node", "2", "--standalone", "--stop-timeout", "3", flood},
                                   dir + "/err", readEnd);
  const int status = waitFor(pid, 30s);
  const auto took = std::chrono::steady_clock::now() - start;
  const std::string err = test::readFile(dir + "/err");
  ASSERT_NE(status, -1) << "ddprun did not end with its stdout blocked\n" << err;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status << "\n" << err;
  EXPECT_LT(took, 15s) << err;  // 1 s until the failure + the 3 s stop timeout + start-up, not 20 s
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
  pid = spawnWithStuckStdout({"--standalone", "--stop-timeout", "2", stubborn}, dir + "/err2", readEnd);
  std::this_thread::sleep_for(3s);  // the pipe and the console queue are full by now
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

TEST(DropIn, EndlessLinesDoNotGrowDdprun) {
  // 200 MB without a newline to the console (and 200 MB more with --tee to a file).
  const std::string dir = test::makeTempDir("endless");
  const std::string cmd = "exec '" + kDdprun + "' --standalone --tee 1 --log-dir '" + dir +
                          "' sh -c \"head -c 200000000 /dev/zero | tr '\\\\000' x; sleep 1\" > /dev/null";
  test::ChildProcess child("/bin/sh", {"-c", cmd}, {});
  long peakKb = 0;
  while (child.running()) {
    std::ifstream status("/proc/" + std::to_string(child.pid()) + "/status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("VmHWM:", 0) == 0) peakKb = std::max(peakKb, std::atol(line.c_str() + 6));
    }
    std::this_thread::sleep_for(50ms);
  }
  auto r = child.wait(120s);
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
  const std::string script = writeScript(dir, "train", "import torch, sys\nprint('torch', torch.__version__, sys.executable)\n");
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
  EXPECT_LT(hint, missing.output.find("started 1 workers")) << missing.output;
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
  const std::vector<std::string> common{"--rdzv-id", "same", "--log-dir", logs, "--redirects", "3",
                                        "--master-port", "0"};
  std::vector<std::string> argsA = common, argsB = common;
  argsA.push_back(a);
  argsB.push_back(b);
  test::ChildProcess jobA(kDdprun, argsA, pythonEnv());
  std::this_thread::sleep_for(300ms);
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
  EXPECT_NE(r.output.find("\n      raise ValueError('bad batch')", tb), std::string::npos) << "indented under the field\n"
                                                                                         << r.output;
  EXPECT_NE(r.output.find("message   : ValueError: bad batch"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("FAILED (role default)"), std::string::npos) << r.output;
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
                                         "    open(f'" + dir + "/ready-{run}-{rank}', 'w').close()\n"
                                         "    while not all(os.path.exists(f'" + dir + "/ready-{run}-{r}') for r in '01'):\n"
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

TEST(DropIn, TheRootCauseIsTheEarliestErrorEvenWhenThatRankIsStillExiting) {
  // Rank 0 records "No space left on device" and then takes its time to exit (atexit); rank 1 fails
  // later with the consequence, and its exit reaches ddprun first. Rank 0's SIGTERM arrives after its
  // error file: it failed on its own, and it is the root cause.
  const std::string dir = test::makeTempDir("root");
  const std::string script = writeScript(
      dir, "disk.py",
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
