// The status page in a real browser: Debian's headless Chromium loads / from a status server that serves a
// 2-rank snapshot, runs the page's script (which polls /status.json), and the rendered DOM must show both
// ranks. A screenshot is kept in the test's output directory (DDPRUN_TEST_OUTPUT_DIR/status_page/).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>

#include "launcher/status/snapshot_json.hpp"
#include "launcher/status/status_page.hpp"
#include "support/child_process.hpp"
#include "support/chromium.hpp"
#include "support/fake_snapshot.hpp"
#include "support/status_fixture.hpp"

namespace ddprun::test {
namespace {
namespace fs = std::filesystem;
using namespace std::chrono_literals;

/// Console errors the page's script raised, as Chromium logs them.
std::string scriptErrors(const std::string& log) {
  std::string errors;
  std::regex error(R"((Uncaught [^\n]*|CONSOLE[^\n]*(Error|error)[^\n]*))");
  for (std::sregex_iterator it(log.begin(), log.end(), error), end; it != end; ++it) errors += it->str() + "\n";
  return errors;
}

TEST(StatusPage, HeadlessChromiumRendersBothRanks) {
  const fs::path out = fs::path(DDPRUN_TEST_OUTPUT_DIR) / "status_page";
  fs::remove_all(out);
  fs::create_directories(out);
  if (!fs::exists(kChromium)) GTEST_SKIP() << "chromium is not installed (tools/setup.sh installs Debian's chromium)";
  ChildResult probe = runChromium("about:blank", {"--dump-dom"}, (out / "probe").string());
  if (probe.exitCode != 0 || readFile((out / "probe.out").string()).find("<html") == std::string::npos) {
    GTEST_SKIP() << "chromium cannot start here: " << readFile((out / "probe.err").string());
  }

  CountingSource counting;
  RunningServer server({}, counting.source());
  // Virtual time runs the page's 1 s polls without waiting for them in real time; fetches pause it.
  ChildResult dump = runChromium(server.url(), {"--virtual-time-budget=5000", "--dump-dom"}, (out / "dom").string());
  const std::string dom = readFile((out / "dom.out").string());
  const std::string log = readFile((out / "dom.err").string());
  ASSERT_EQ(dump.exitCode, 0) << log;
  EXPECT_EQ(scriptErrors(log), "");

  // Both ranks are rows of the table, with what the snapshot says about them.
  std::smatch row;
  for (auto [rank, pid, state] : {std::tuple{0, "4242", "running"}, std::tuple{1, "4243", "hung"}}) {
    std::regex rowPattern("<tr[^>]*data-rank=\"" + std::to_string(rank) + "\"[^>]*>(.*?)</tr>");
    ASSERT_TRUE(std::regex_search(dom, row, rowPattern)) << "rank " << rank << " missing from the DOM:\n" << dom;
    const std::string cells = row[1];
    EXPECT_NE(cells.find(">" + std::string(pid) + "<"), std::string::npos) << cells;
    EXPECT_NE(cells.find(">" + std::string(state) + "<"), std::string::npos) << cells;
    EXPECT_NE(cells.find("<polyline"), std::string::npos) << "no sparkline for rank " << rank << ": " << cells;
  }
  EXPECT_TRUE(std::regex_search(
      dom, std::regex("<tr[^>]*class=\"hung\"[^>]*data-rank=\"1\"|<tr[^>]*data-rank=\"1\"[^>]*class=\"hung\"")))
      << "the hung rank is not highlighted";
  EXPECT_NE(dom.find(">HUNG<"), std::string::npos);
  EXPECT_NE(dom.find("mnist-42"), std::string::npos);                // job header
  EXPECT_NE(dom.find("RuntimeError: injected"), std::string::npos);  // last failure
  EXPECT_NE(dom.find(">failure<"), std::string::npos);               // attempt history: attempt 0 ended by a failure
  EXPECT_NE(dom.find("live · updated"), std::string::npos);
  EXPECT_GE(*counting.calls, 2) << "the page did not poll /status.json again";

  // A picture for people (and CI artifacts); check it is a real PNG.
  const std::string png = (out / "status_page.png").string();
  ChildResult shot =
      runChromium(server.url(), {"--virtual-time-budget=3000", "--window-size=1280,860", "--screenshot=" + png},
                  (out / "screenshot").string());
  ASSERT_EQ(shot.exitCode, 0) << readFile((out / "screenshot.err").string());
  ASSERT_TRUE(fs::exists(png)) << readFile((out / "screenshot.err").string());
  EXPECT_GT(fs::file_size(png), 10'000u);
  EXPECT_EQ(readFile(png).substr(1, 3), "PNG");
}

TEST(StatusPage, TheReportOfAFinishedJobOpensFromItsFile) {
  const fs::path out = fs::path(DDPRUN_TEST_OUTPUT_DIR) / "status_report";
  fs::remove_all(out);
  fs::create_directories(out);
  if (const std::string problem = chromiumProblem(out.string()); !problem.empty()) GTEST_SKIP() << problem;
  // The final snapshot of a job that hung once and then failed for good; a message with "</script>" in it must
  // not end the data island early.
  status::AgentSnapshot final = fakeSnapshot(0);
  final.state = "done";
  final.ended = status::JobEnd{final.snapshotUnixMs, 1, "failed with no restarts left"};
  status::Culprit hung;
  hung.rank = 1;
  hung.localRank = 1;
  hung.cause = "hang";
  hung.signal = 6;
  hung.message = "hang: no progress for 5 s after step 30; rank 1's main thread is in </script><b>x";
  hung.stacksFile = "/tmp/logs/run/attempt_1/1/stacks.txt";
  final.attempts.back().endUnixMs = final.snapshotUnixMs;
  final.attempts.back().reason = "hang";
  final.attempts.back().culprits = {hung};
  // Before the hang, rank 0 was killed and replaced in place (--restart-scope rank): an event of its own.
  status::Culprit killed;
  killed.rank = 0;
  killed.cause = "signal";
  killed.signal = 9;
  killed.message = "killed by SIGKILL";
  final.attempts.back().replacements.push_back(
      {final.snapshotUnixMs - 5'000, 0, 1, final.snapshotUnixMs - 4'930, killed});
  final.attempts.back().replacements.push_back({final.snapshotUnixMs - 2'000, 1, 2, std::nullopt, std::nullopt});
  final.counters.rankReplacements = 2;
  const std::string file = (out / "report.html").string();
  std::ofstream(file) << status::reportPageHtml(status::snapshotToJson(final).dump());
  ChildResult dump =
      runChromium("file://" + file, {"--virtual-time-budget=3000", "--dump-dom"}, (out / "dom").string());
  const std::string dom = readFile((out / "dom.out").string());
  const std::string log = readFile((out / "dom.err").string());
  ASSERT_EQ(dump.exitCode, 0) << log;
  EXPECT_EQ(scriptErrors(log), "");
  std::smatch live;
  ASSERT_TRUE(std::regex_search(dom, live, std::regex(R"(<span id="live"[^>]*>([^<]*)</span>)"))) << dom;
  EXPECT_EQ(live[1].str().rfind("report of a finished job", 0), 0u) << live[1] << ": a report polls nothing";
  EXPECT_NE(dom.find("Job ended at"), std::string::npos) << dom;
  EXPECT_NE(dom.find("failed with no restarts left (exit code 1)"), std::string::npos) << dom;
  EXPECT_NE(dom.find("stacks: <a href=\"file:///tmp/logs/run/attempt_1/1/stacks.txt\""), std::string::npos)
      << "a link to the stacks:\n"
      << dom;
  EXPECT_NE(dom.find("&lt;/script&gt;&lt;b&gt;x"), std::string::npos) << "shown as text, not markup:\n" << dom;
  EXPECT_NE(dom.find("RuntimeError: injected"), std::string::npos);
  std::smatch replacement;
  ASSERT_TRUE(std::regex_search(dom, replacement, std::regex(R"(<tr[^>]*data-replaced-rank="0"[^>]*>(.*?)</tr>)")))
      << "no row for the replacement:\n"
      << dom;
  const std::string cells = replacement[1];
  EXPECT_NE(cells.find("rank 0 replaced in place · generation 1 · formed in 70 ms"), std::string::npos) << cells;
  EXPECT_NE(cells.find("signal · SIGKILL · killed by SIGKILL"), std::string::npos) << cells;
  EXPECT_NE(dom.find("Ranks replaced"), std::string::npos) << dom;
  std::smatch abandoned;
  ASSERT_TRUE(std::regex_search(dom, abandoned, std::regex(R"(<tr[^>]*data-replaced-rank="1"[^>]*>(.*?)</tr>)")));
  EXPECT_NE(abandoned[1].str().find("never formed"), std::string::npos)
      << "the attempt ended before it formed: " << abandoned[1];
}

}  // namespace
TEST(StatusPage, AReportKeepsItsDataWhateverAFieldHolds) {
  // "<!--<script>" in a value puts HTML's parser into its double escaped script state, in which the island's own
  // "</script>" does not end it: the page's script would be swallowed and the report render nothing. Each field a
  // rank or a user controls gets the payload, one report each.
  const fs::path out = fs::path(DDPRUN_TEST_OUTPUT_DIR) / "status_report_payload";
  fs::remove_all(out);
  fs::create_directories(out);
  if (const std::string problem = chromiumProblem(out.string()); !problem.empty()) GTEST_SKIP() << problem;
  const std::string payload = "x<!--<script>y</script";
  const std::vector<std::pair<std::string, std::function<void(status::AgentSnapshot&)>>> fields = {
      {"role", [&](status::AgentSnapshot& s) { s.role = payload; }},
      {"run_id", [&](status::AgentSnapshot& s) { s.runId = payload; }},
      {"message", [&](status::AgentSnapshot& s) { s.attempts.front().culprits.front().message = payload; }},
      {"last_failure", [&](status::AgentSnapshot& s) { s.lastFailure = "failed:\n  message   : " + payload; }},
  };
  for (const auto& [name, set] : fields) {
    status::AgentSnapshot final = fakeSnapshot(0);
    final.state = "done";
    final.ended = status::JobEnd{final.snapshotUnixMs, 1, "failed with no restarts left"};
    set(final);
    const std::string file = (out / (name + ".html")).string();
    std::ofstream(file) << status::reportPageHtml(status::snapshotToJson(final).dump());
    ChildResult dump =
        runChromium("file://" + file, {"--virtual-time-budget=3000", "--dump-dom"}, (out / name).string());
    const std::string dom = readFile((out / (name + ".out")).string());
    ASSERT_EQ(dump.exitCode, 0) << name << ": " << readFile((out / (name + ".err")).string());
    EXPECT_EQ(scriptErrors(readFile((out / (name + ".err")).string())), "") << name;
    EXPECT_NE(dom.find("report of a finished job"), std::string::npos) << name << ": the report did not render\n"
                                                                       << dom;
    EXPECT_NE(dom.find("x&lt;!--&lt;script&gt;y&lt;/script"), std::string::npos)
        << name << ": the value is not shown as text\n"
        << dom;
    EXPECT_NE(dom.find("failed with no restarts left (exit code 1)"), std::string::npos) << name;
  }
}

}  // namespace ddprun::test
