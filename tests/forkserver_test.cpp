// --start-method forkserver with real processes: a program that supports the protocol starts once as a
// template and every rank of every attempt is forked from it (its start-up runs once), each rank is ddprun's
// child in a process group of its own with the environment of its rank; kill -9 of ddprun leaves nothing,
// template included; a program without support is started the normal way.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "support/child_process.hpp"
#include "support/wait_until.hpp"

namespace ddprun::launcher {
using namespace std::chrono_literals;
namespace {

const std::string kDdprun = DDPRUN_BIN;
const std::string kDemo = DDPRUN_FORKSERVER_DEMO_BIN;

struct RankLine {
  std::string rank, attempt;
  int pid = 0, parent = 0, startedBy = 0, pgid = 0;
  std::string fd, usr1;
};

std::vector<RankLine> rankLines(const std::string& output) {
  std::vector<RankLine> lines;
  std::regex pattern(
      R"(rank (\S+) attempt (\S+) pid (\d+) parent (\d+) started-by (\d+) pgid (\d+) data d forkserver-fd (\S+) usr1 (\S+))");
  for (std::sregex_iterator it(output.begin(), output.end(), pattern), end; it != end; ++it) {
    const auto& m = *it;
    lines.push_back({m[1], m[2], std::stoi(m[3]), std::stoi(m[4]), std::stoi(m[5]), std::stoi(m[6]), m[7], m[8]});
  }
  return lines;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(ForkServer, EveryRankOfEveryAttemptIsForkedFromOneTemplate) {
  test::ChildProcess ddprun(
      kDdprun, {"--nproc-per-node", "3", "--standalone", "--max-restarts", "1", "--start-method", "forkserver", kDemo},
      {{"START_SECONDS", "1"}, {"EXIT_RANK", "1"}, {"EXIT_ATTEMPT", "0"}});
  auto r = ddprun.wait(120s);
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_NE(r.output.find("template ready"), std::string::npos) << r.output;
  EXPECT_EQ(count(r.output, "start-up done"), 1u) << "the start-up ran more than once\n" << r.output;
  const auto lines = rankLines(r.output);
  // 3 ranks in attempt 1; in attempt 0 a rank may be stopped (rank 1 failed) before it prints.
  ASSERT_GE(lines.size(), 4u) << r.output;
  EXPECT_EQ(std::count_if(lines.begin(), lines.end(), [](const RankLine& l) { return l.attempt == "1"; }), 3)
      << r.output;
  std::set<int> templates, pids;
  for (const auto& line : lines) {
    templates.insert(line.startedBy);
    pids.insert(line.pid);
    EXPECT_EQ(line.parent, ddprun.pid()) << "a rank is ddprun's child (adopted), not the template's";
    EXPECT_EQ(line.pgid, line.pid) << "each rank in a process group of its own";
    EXPECT_EQ(line.fd, "unset") << "the protocol's descriptor does not leak into a rank";
  }
  EXPECT_EQ(templates.size(), 1u) << "all ranks come from one template";
  EXPECT_EQ(pids.count(*templates.begin()), 0u) << "no rank is the template itself";
  EXPECT_EQ(pids.size(), lines.size()) << "every rank a process of its own";
  for (const char* rank : {"[rank0]:rank 0 attempt 1", "[rank1]:rank 1 attempt 1", "[rank2]:rank 2 attempt 1"}) {
    EXPECT_NE(r.output.find(rank), std::string::npos) << rank << "\n" << r.output;
  }
}

TEST(ForkServer, SlurmsWarningSignalLeavesTheTemplateServingAndRanksWithTheProgramsOwnAction) {
  // Slurm's `scancel --signal=USR1` reaches every process of the step, the template included.
  const std::string go = test::makeTempDir("ddprun-forkserver") + "/go";
  test::ChildProcess ddprun(
      kDdprun, {"--nproc-per-node", "1", "--standalone", "--max-restarts", "1", "--start-method", "forkserver", kDemo},
      {{"EXIT_RANK", "0"}, {"EXIT_ATTEMPT", "0"}, {"WAIT_FILE", go}});
  std::vector<RankLine> lines;
  EXPECT_TRUE(test::waitUntil(
      [&] {
        lines = rankLines(ddprun.outputSoFar());
        return !lines.empty();
      },
      60s));
  ASSERT_EQ(lines.size(), 1u) << ddprun.outputSoFar();
  const int templatePid = lines[0].startedBy;
  ASSERT_EQ(::kill(templatePid, SIGUSR1), 0);
  std::ofstream(go).put('\n');  // rank 0 of attempt 0 now exits 3: attempt 1 is forked from the same template
  auto r = ddprun.wait(120s);
  ASSERT_EQ(r.exitCode, 0) << r.output;
  lines = rankLines(r.output);
  ASSERT_EQ(lines.size(), 2u) << r.output;
  EXPECT_EQ(lines[1].attempt, "1") << r.output;
  EXPECT_EQ(lines[1].startedBy, templatePid) << "the template did not survive SIGUSR1\n" << r.output;
  for (const auto& line : lines) EXPECT_EQ(line.usr1, "default") << "the rank keeps the program's own SIGUSR1 action";
}

TEST(ForkServer, KillingDdprunLeavesNeitherTemplateNorRanks) {
  test::ChildProcess ddprun(kDdprun, {"--nproc-per-node", "2", "--standalone", "--start-method", "forkserver", kDemo},
                            {{"HANG_SECONDS", "300"}});
  std::vector<RankLine> lines;
  EXPECT_TRUE(test::waitUntil(
      [&] {
        lines = rankLines(ddprun.outputSoFar());
        return lines.size() >= 2;
      },
      60s));
  ASSERT_EQ(lines.size(), 2u) << ddprun.outputSoFar();
  const int templatePid = lines[0].startedBy;
  ::kill(ddprun.pid(), SIGKILL);
  ddprun.wait(30s);
  auto gone = [](int pid) {
    // Gone, or a zombie waiting for its (new) parent: either way nothing runs.
    std::ostringstream path;
    path << "/proc/" << pid << "/stat";
    std::string text = test::readFile(path.str());
    return text.empty() || text.find(") Z") != std::string::npos;
  };
  EXPECT_TRUE(test::waitUntil([&] { return gone(templatePid) && gone(lines[0].pid) && gone(lines[1].pid); }, 30s));
  EXPECT_TRUE(gone(templatePid)) << "the template survived";
  EXPECT_TRUE(gone(lines[0].pid)) << "rank 0 survived";
  EXPECT_TRUE(gone(lines[1].pid)) << "rank 1 survived";
}

TEST(ForkServer, AProgramWithoutSupportStartsTheNormalWay) {
  auto r = test::runProcess(
      kDdprun,
      {"--nproc-per-node", "2", "--standalone", "--start-method", "forkserver", "sh", "-c", "echo rank $RANK pid $$"},
      {}, 60s);
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_NE(r.output.find("does not support it"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[rank1]:rank 1 pid"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace ddprun::launcher
