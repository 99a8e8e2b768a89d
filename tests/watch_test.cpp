// Watching training, not only processes, end to end with real workers (the look-alikes and the latencies of the hang
// rule are recorded cases replayed in watch_replay_test): a hung stock python3-torch DDP script is found from its
// progress file, every rank's stacks are saved before the group is stopped, and the group restarts; a rank that
// spins is reported, not stopped, until the busy timeout; a rank that exits 0 early is named; a script that never
// reports is never flagged; a job whose attempts never get further gives up with its own exit code; the status page
// of a running job, as JSON, as Prometheus metrics (promtool) and in a browser, and the report it leaves; a hung
// rank's flight recorder dump asked for through the store key torch's own client sees.
#include <gtest/gtest.h>
#include <signal.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>

#include "support/child_process.hpp"
#include "support/chromium.hpp"
#include "support/http_test_client.hpp"
#include "support/wait_until.hpp"

namespace ddprun::launcher {
namespace fs = std::filesystem;
using namespace std::chrono_literals;
namespace {

const std::string kDdprun = DDPRUN_BIN;
const std::string kScript = std::string(DDPRUN_SOURCE_DIR) + "/tests/scripts/progress_ddp.py";
const std::string kPatterns = std::string(DDPRUN_SOURCE_DIR) + "/tests/scripts/watch_patterns.py";
const std::string kFlightRecorder = std::string(DDPRUN_SOURCE_DIR) + "/tests/scripts/fake_flight_recorder.py";

std::map<std::string, std::string> pythonEnv() { return {{"PYTHON_EXEC", test::pythonExe()}}; }

/// The one run directory ddprun made under `logDir`.
std::string runDir(const std::string& logDir) {
  for (const auto& entry : fs::directory_iterator(logDir)) {
    if (entry.is_directory()) return entry.path().string();
  }
  return "";
}

std::vector<nlohmann::json> attemptLines(const std::string& run) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(run + "/attempts.jsonl");
  std::string line;
  while (std::getline(in, line)) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

/// The wall time (Unix seconds) of ddprun's first log line whose text after the time matches `pattern`; -1 when none.
double timeOf(const std::string& output, const std::string& pattern) {
  std::smatch when;
  const std::regex line(R"(\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(\.\d{3})\] \[ddprun\] )" + pattern);
  if (!std::regex_search(output, when, line)) return -1;
  std::tm local{};
  std::istringstream(when[1].str()) >> std::get_time(&local, "%Y-%m-%d %H:%M:%S");
  local.tm_isdst = -1;
  return static_cast<double>(std::mktime(&local)) + std::stod(when[2]);
}

/// Reads the status page's port from ddprun's log ("status page on http://127.0.0.1:PORT/").
int statusPort(test::ChildProcess& ddprun);

TEST(Watch, AHungStockScriptIsFoundWithEveryRanksTracebacksAndRestarts) {
  // Rank 1 blocks in time.sleep at step 30 of attempt 0 while rank 0 waits in the next allreduce.
  const std::string logs = test::makeTempDir("hang");
  auto r = test::runProcess(kDdprun,
                            {"--nproc-per-node", "2", "--standalone", "--max-restarts", "1", "--hang-min-timeout", "2",
                             "--log-dir", logs, kScript, "--hang-rank", "1", "--hang-step", "30"},
                            pythonEnv(), 180s);
  ASSERT_EQ(r.exitCode, 0) << r.output;
  // What was seen, the timeout and where it came from, and what to do.
  EXPECT_NE(r.output.find("hang: no rank has stepped for"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(last step 30)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 1's main thread is in clock_nanosleep"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 0 waits in a collective (c10d::"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("hang timeout 2.0 s (the floor, --hang-min-timeout"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("hint: this job reports only its steps"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("likely cause of the hang: rank 1"), std::string::npos) << r.output;
  // The abort for tracebacks is announced before Python's "Fatal Python error: Aborted" blocks.
  const auto announced = r.output.find("is ddprun's doing, not a crash");
  ASSERT_NE(announced, std::string::npos) << r.output;
  EXPECT_LT(announced, r.output.find("]:Fatal Python error: Aborted")) << r.output;
  EXPECT_NE(r.output.find("rank 1: Python main thread in File \"" + kScript), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 1: 60 steps done in attempt 1"), std::string::npos) << r.output;
  const std::string run = runDir(logs);
  const std::string rank0 = test::readFile(run + "/attempt_0/0/stacks.txt");
  const std::string rank1 = test::readFile(run + "/attempt_0/1/stacks.txt");
  // Native stacks of every thread, then every thread's Python traceback.
  EXPECT_NE(rank1.find("TID "), std::string::npos) << rank1.substr(0, 2000);
  EXPECT_NE(rank1.find("Python tracebacks of every thread"), std::string::npos) << rank1;
  EXPECT_NE(rank1.find("progress_ddp.py\", line"), std::string::npos) << rank1;
  // Rank 0 waits for rank 1 inside DDP's backward (the allreduce of its gradients).
  EXPECT_NE(rank0.find("c10d::Reducer"), std::string::npos) << rank0.substr(0, 4000);
  EXPECT_NE(rank0.find("in backward"), std::string::npos) << rank0;
  // attempts.jsonl names the culprit, how it ended and where its stacks are.
  const auto attempts = attemptLines(run);
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_EQ(attempts[0]["reason"], "hang");
  EXPECT_EQ(attempts[0]["best_step"], 30);
  ASSERT_EQ(attempts[0]["culprits"].size(), 1u) << attempts[0].dump();
  EXPECT_EQ(attempts[0]["culprits"][0]["rank"], 1);
  EXPECT_EQ(attempts[0]["culprits"][0]["cause"], "hang");
  EXPECT_EQ(attempts[0]["culprits"][0]["signal_name"], "SIGABRT");
  EXPECT_EQ(attempts[0]["culprits"][0]["stacks"], run + "/attempt_0/1/stacks.txt");
  EXPECT_EQ(attempts[1]["reason"], "success");
  EXPECT_EQ(attempts[1]["best_step"], 59);
  // The run's report: the final status, with the hang remembered.
  const auto final = nlohmann::json::parse(test::readFile(run + "/status.json"));
  EXPECT_EQ(final["state"], "done");
  EXPECT_EQ(final["ended"]["exit_code"], 0);
  EXPECT_EQ(final["counters"]["hangs_detected"], 1);
  EXPECT_EQ(final["counters"]["restarts_by_reason"]["hang"], 1);
  EXPECT_NE(final["last_failure"].get<std::string>().find("Likely cause: rank 1 held the others up"), std::string::npos)
      << final["last_failure"];
  EXPECT_NE(r.output.find("run report: " + run + "/report.html"), std::string::npos) << r.output;
  fs::remove_all(logs);
}

TEST(Watch, AHungRankGetsTheFlightRecorderDumpRequestThroughTorchsOwnStoreClient) {
  // One rank sleeping is no deadlock: it is hung by the idle timeout (3 s here).
  // The rank stands in for NCCL's flight recorder with a stock TCPStore client (tests/scripts/fake_flight_recorder.py)
  // and answers only the store key, as ranks on other nodes must: the key ddprun sets has to be the one torch's client
  // sees as "exception_dump" at the root of the store, and the restart must start without it.
  const std::string logs = test::makeTempDir("frkey");
  auto r = test::runProcess(
      kDdprun,
      {"--nproc-per-node", "1", "--standalone", "--max-restarts", "1", "--hang-min-timeout", "2", "--hang-timeout", "2",
       "--hang-idle-timeout", "3", "--log-dir", logs, kFlightRecorder, "--answer", "key"},
      pythonEnv(), 180s);
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_NE(r.output.find("rank 0 attempt 0: exception_dump at start: absent"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 0: wrote nccl_trace_rank_0, asked by the store key"), std::string::npos) << r.output;
  const std::string dump = runDir(logs) + "/attempt_0/0/nccl_trace_rank_0";
  EXPECT_NE(r.output.find("rank 0: NCCL flight recorder dump in " + dump), std::string::npos) << r.output;
  std::ifstream in(dump);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "dump of rank 0, asked by the store key\n");
  EXPECT_NE(r.output.find("rank 0 attempt 1: exception_dump at start: absent"), std::string::npos)
      << "the dump request outlived its attempt\n"
      << r.output;
  EXPECT_NE(r.output.find("rank 0 attempt 1: done"), std::string::npos) << r.output;
  fs::remove_all(logs);
}

TEST(Watch, ASpinningRankIsReportedAndStoppedOnlyAtTheBusyTimeout) {
  // Rank 1 spins in `while True: pass` at step 3 while rank 0 waits in the allreduce. No evidence tells a spin from a
  // long computation for certain: it is reported (its line, its stacks, the status page) and the group is stopped at
  // the busy timeout (40 s here). With --hang-spin-action restart the same evidence stops it at once.
  const std::string logs = test::makeTempDir("spin");
  test::ChildProcess reported(kDdprun,
                              {"--nproc-per-node",
                               "2",
                               "--standalone",
                               "--max-restarts",
                               "0",
                               "--hang-min-timeout",
                               "2",
                               "--hang-spin-timeout",
                               "10",
                               "--hang-busy-timeout",
                               "40",
                               "--status-port",
                               "0",
                               "--log-dir",
                               logs + "/reported",
                               kPatterns,
                               "--pattern",
                               "spin",
                               "--rank",
                               "1",
                               "--step",
                               "3",
                               "--mark-file",
                               logs + "/reported.mark"},
                              pythonEnv());
  const int port = statusPort(reported);
  ASSERT_GT(port, 0) << reported.outputSoFar();
  ASSERT_TRUE(test::waitForOutput(reported, "rank 1 spins in one place", 120s)) << reported.outputSoFar();
  test::HttpTestClient client("127.0.0.1", static_cast<uint16_t>(port));
  const auto status = nlohmann::json::parse(client.get("/status.json").body);
  EXPECT_NE(status["ranks"][1]["suspected"].get<std::string>().find("spins in one place? (File \"" + kPatterns),
            std::string::npos)
      << status.dump(2);
  EXPECT_EQ(status["counters"]["spins_reported"], 1) << status.dump(2);
  EXPECT_EQ(status["state"], "running") << "reported, not stopped";
  auto r = reported.wait(240s);
  EXPECT_EQ(r.exitCode, 1) << r.output;
  const auto report = r.output.find("rank 1 spins in one place (File \"" + kPatterns);
  const auto hang = r.output.find("hang: no rank has stepped for");
  ASSERT_NE(report, std::string::npos) << r.output;
  ASSERT_NE(hang, std::string::npos) << r.output;
  EXPECT_LT(report, hang);
  EXPECT_NE(r.output.find("longer than --hang-busy-timeout 40.0 s", hang), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 1: stacks in "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 1: Python main thread in File \"" + kPatterns), std::string::npos) << r.output;
  const double reportedAfter =
      timeOf(r.output, "\\[warning\\] no step for") - std::stod(test::readFile(logs + "/reported.mark"));
  EXPECT_GE(reportedAfter, 10.0) << r.output;
  EXPECT_LT(reportedAfter, 60.0) << r.output;
  EXPECT_GE(timeOf(r.output, "\\[error\\] hang:") - std::stod(test::readFile(logs + "/reported.mark")), 40.0);
  // --hang-spin-action restart: stopped when reported.
  r = test::runProcess(kDdprun,
                       {"--nproc-per-node",
                        "2",
                        "--standalone",
                        "--max-restarts",
                        "0",
                        "--hang-min-timeout",
                        "2",
                        "--hang-spin-timeout",
                        "10",
                        "--hang-spin-action",
                        "restart",
                        "--log-dir",
                        logs + "/restart",
                        kPatterns,
                        "--pattern",
                        "spin",
                        "--rank",
                        "1",
                        "--step",
                        "3",
                        "--mark-file",
                        logs + "/restart.mark"},
                       pythonEnv(), 240s);
  EXPECT_EQ(r.exitCode, 1) << r.output;
  EXPECT_NE(r.output.find("and the ranks that wait in a collective wait for one that spins"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("likely cause of the hang: rank 1"), std::string::npos) << r.output;
  const double stoppedAfter = timeOf(r.output, "\\[error\\] hang:") - std::stod(test::readFile(logs + "/restart.mark"));
  EXPECT_GE(stoppedAfter, 10.0) << r.output;
  EXPECT_LT(stoppedAfter, 60.0) << r.output;
  fs::remove_all(logs);
}

TEST(Watch, ARankThatExitsZeroWhileItsPeersTrainIsTheRootCause) {
  // Rank 1 leaves with exit code 0 at step 5 (a SIGTERM handler calling sys.exit(0)); rank 0's next allreduce
  // fails. The summary names rank 1, not the peer that failed in its collective.
  auto r = test::runProcess(
      kDdprun,
      {"--nproc-per-node", "2", "--standalone", kPatterns, "--pattern", "early-exit", "--rank", "1", "--step", "5"},
      pythonEnv(), 180s);
  EXPECT_EQ(r.exitCode, 1) << r.output;
  const auto root = r.output.find("Root Cause (first observed failure):");
  ASSERT_NE(root, std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank      : 1 (local_rank: 1)", root), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("exited with code 0 while its peers still ran", root), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Likely cause: rank 1 exited 0 while its peers still ran"), std::string::npos) << r.output;
  // The console's line for the failure names the early exit too.
  EXPECT_TRUE(
      std::regex_search(r.output, std::regex(R"(rank 0 \(pid \d+\) exited with code 1; rank 1 exited 0 before it)")))
      << r.output;
}

TEST(Watch, AScriptThatNeverReportsIsNeverFlaggedEvenThroughALongPause) {
  auto r = test::runProcess(kDdprun,
                            {"--nproc-per-node", "2", "--standalone", "--hang-min-timeout", "1", kScript, "--steps",
                             "40", "--no-progress", "--pause-step", "20", "--pause-seconds", "20"},
                            pythonEnv(), 180s);
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_EQ(r.output.find("hang"), std::string::npos) << r.output;
}

TEST(Watch, AttemptsThatNeverGetFurtherEndTheJobWithItsOwnExitCode) {
  // Rank 0 hangs at step 5 in every attempt, and every restart resumes at step 5 (as from a checkpoint): attempt 0
  // gets from 0 to 5 (progress), attempts 1 and 2 never get past where they started, and with
  // --max-no-progress-restarts 2 ddprun gives up (exit 93) with restarts left.
  const std::string logs = test::makeTempDir("noprogress");
  auto r = test::runProcess(kDdprun,
                            {"--nproc-per-node", "2", "--standalone", "--max-restarts", "10",
                             "--max-no-progress-restarts", "2", "--hang-min-timeout", "1", "--log-dir", logs, kScript,
                             "--hang-rank", "0", "--hang-step", "5", "--hang-every-attempt", "--resume-step", "5"},
                            pythonEnv(), 240s);
  EXPECT_EQ(r.exitCode, 93) << r.output;
  EXPECT_NE(r.output.find("giving up: 2 attempt(s) in a row ended no further than step 5 (the best of the attempts "
                          "before), each for the same cause (hang: hang)"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(attemptLines(runDir(logs)).size(), 3u);
  fs::remove_all(logs);
  // A script without checkpoints starts from step 0 in every attempt and hangs at step 5 in each: every attempt gets
  // "past where it started", none further than the first. The same verdict.
  const std::string fresh = test::makeTempDir("noprogress0");
  r = test::runProcess(kDdprun,
                       {"--nproc-per-node", "2", "--standalone", "--max-restarts", "10", "--max-no-progress-restarts",
                        "2", "--hang-min-timeout", "1", "--log-dir", fresh, kScript, "--hang-rank", "0", "--hang-step",
                        "5", "--hang-every-attempt"},
                       pythonEnv(), 240s);
  EXPECT_EQ(r.exitCode, 93) << r.output;
  EXPECT_EQ(attemptLines(runDir(fresh)).size(), 3u);
  fs::remove_all(fresh);
}

/// Reads the status page's port from ddprun's log ("status page on http://127.0.0.1:PORT/").
int statusPort(test::ChildProcess& ddprun) {
  std::smatch port;
  for (int i = 0; i < 600; ++i) {
    const std::string out = ddprun.outputSoFar();
    if (std::regex_search(out, port, std::regex(R"(status page on http://127\.0\.0\.1:(\d+)/)"))) {
      return std::stoi(port[1]);
    }
    std::this_thread::sleep_for(50ms);
  }
  return -1;
}

TEST(Watch, AnOpenStatusPageSeesHowTheJobEnded) {
  // A page polls (here every 200 ms, as a browser would every second); the job ends between two polls. ddprun
  // waits for the page's next poll, so the last thing it saw is the end, not a "running" job gone silent.
  test::ChildProcess ddprun(
      kDdprun, {"--nproc-per-node", "2", "--standalone", "--status-port", "0", "sh", "-c", "sleep 1.5"}, {});
  const int port = statusPort(ddprun);
  ASSERT_GT(port, 0) << ddprun.outputSoFar();
  nlohmann::json last;
  for (int i = 0; i < 300; ++i) {
    try {
      test::HttpTestClient client("127.0.0.1", static_cast<uint16_t>(port));
      last = nlohmann::json::parse(client.get("/status.json").body);
    } catch (const std::exception&) {
      break;  // ddprun has exited
    }
    std::this_thread::sleep_for(200ms);  // the page's polling interval, not a synchronisation
  }
  auto r = ddprun.wait(60s);
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_EQ(last["state"], "done") << last.dump(2);
  ASSERT_TRUE(last["ended"].is_object()) << last.dump(2);
  EXPECT_EQ(last["ended"]["exit_code"], 0);
  EXPECT_EQ(last["ended"]["how"], "every worker exited 0");
}

TEST(Watch, TheStatusPageOfARunningJob) {
  // Steps of 0.1 s for a while, so the page sees a running job; rank 1 fails once at step 40 so the job
  // restarts while 200 idle connections sit on the status page.
  const std::string logs = test::makeTempDir("status");
  test::ChildProcess ddprun(kDdprun, {"--nproc-per-node",
                                      "2",
                                      "--standalone",
                                      "--rdzv-id",
                                      "mnist-status",
                                      "--max-restarts",
                                      "1",
                                      "--status-port",
                                      "0",
                                      "--log-dir",
                                      logs,
                                      kScript,
                                      "--steps",
                                      "80",
                                      "--step-seconds",
                                      "0.1",
                                      "--fail-rank",
                                      "1",
                                      "--fail-step",
                                      "40"},
                            pythonEnv());
  const int port = statusPort(ddprun);
  ASSERT_GT(port, 0) << ddprun.outputSoFar();
  // Wait until both ranks report progress.
  nlohmann::json status;
  for (int i = 0; i < 300; ++i) {
    test::HttpTestClient client("127.0.0.1", static_cast<uint16_t>(port));
    status = nlohmann::json::parse(client.get("/status.json").body);
    if (status["ranks"].size() == 2 && !status["ranks"][1]["step"].is_null() && status["ranks"][1]["step"] > 5) break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(status["run_id"], "mnist-status") << status.dump(2);
  EXPECT_EQ(status["state"], "running") << status.dump(2);
  ASSERT_EQ(status["ranks"].size(), 2u) << status.dump(2);
  for (int rank : {0, 1}) {
    const auto& r = status["ranks"][rank];
    EXPECT_EQ(r["global_rank"], rank);
    EXPECT_GT(r["pid"], 0);
    EXPECT_EQ(r["state"], "running");
    EXPECT_TRUE(r["step"].is_number()) << r.dump();
    EXPECT_TRUE(r["progress_age_s"].is_number()) << r.dump();
  }
  EXPECT_TRUE(status["store"].is_object()) << status.dump(2);
  EXPECT_GE(status["store"]["connections"], 2) << status.dump(2);

  // /metrics as Prometheus's own promtool judges it.
  const std::string metricsFile = logs + "/metrics.txt";
  {
    test::HttpTestClient client("127.0.0.1", static_cast<uint16_t>(port));
    auto metrics = client.get("/metrics");
    EXPECT_EQ(metrics.status, 200);
    std::ofstream(metricsFile) << metrics.body;
    EXPECT_NE(metrics.body.find("ddprun_worker_step{"), std::string::npos) << metrics.body;
  }
  if (fs::exists("/usr/bin/promtool")) {
    auto check = test::runProcess("/bin/sh", {"-c", "/usr/bin/promtool check metrics < " + metricsFile}, {}, 60s);
    EXPECT_EQ(check.exitCode, 0) << check.output;
    EXPECT_EQ(check.output, "") << check.output;
  }

  // Bad and oversized requests.
  {
    test::HttpTestClient bad("127.0.0.1", static_cast<uint16_t>(port));
    ASSERT_TRUE(bad.send("NONSENSE\r\n\r\n"));
    EXPECT_EQ(bad.readReply().status, 400);
    test::HttpTestClient missing("127.0.0.1", static_cast<uint16_t>(port));
    EXPECT_EQ(missing.get("/no-such-page").status, 404);
    test::HttpTestClient huge("127.0.0.1", static_cast<uint16_t>(port));
    EXPECT_EQ(huge.get("/status.json", "X-Big: " + std::string(64 * 1024, 'x') + "\r\n").status, 431);
  }

  // The page in a browser during the running job: both ranks appear; a screenshot is kept.
  const fs::path out = fs::path(DDPRUN_TEST_OUTPUT_DIR) / "watch_status_page";
  fs::create_directories(out);
  if (const std::string problem = test::chromiumProblem(out.string()); problem.empty()) {
    const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/";
    test::runChromium(url, {"--virtual-time-budget=3000", "--dump-dom"}, (out / "dom").string());
    test::runChromium(
        url, {"--virtual-time-budget=3000", "--window-size=1280,800", "--screenshot=" + (out / "page.png").string()},
        (out / "shot").string());
    const std::string dom = test::readFile((out / "dom.out").string());
    EXPECT_NE(dom.find("data-rank=\"0\""), std::string::npos) << dom;
    EXPECT_NE(dom.find("data-rank=\"1\""), std::string::npos) << dom;
    EXPECT_NE(dom.find("mnist-status"), std::string::npos);
    EXPECT_TRUE(fs::exists(out / "page.png"));
  } else {
    std::cerr << "browser part skipped: " << problem << "\n";
  }

  // 200 idle connections do not delay the restart after rank 1's failure at step 40.
  std::vector<std::unique_ptr<test::HttpTestClient>> idle;
  for (int i = 0; i < 200; ++i)
    idle.push_back(std::make_unique<test::HttpTestClient>("127.0.0.1", static_cast<uint16_t>(port)));
  auto r = ddprun.wait(180s);
  EXPECT_EQ(r.exitCode, 0) << r.output;
  std::smatch restart;
  ASSERT_TRUE(
      std::regex_search(r.output, restart, std::regex(R"(restarted 2 workers, ([0-9.]+) ms after the failure)")))
      << r.output;
  EXPECT_LT(std::stod(restart[1]), 1000.0) << "the restart waited for the status page's clients";
  fs::remove_all(logs);
}

}  // namespace
}  // namespace ddprun::launcher
