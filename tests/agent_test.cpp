// The agent as a whole, in this process: the composition root wired to its real parts, with shell one-liners as
// fake workers (no Python, no training), so a wiring mistake between the parts shows here in a second.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "launcher/agent.hpp"
#include "launcher/config/launch_plan.hpp"
#include "support/child_process.hpp"
#include "support/launch_args.hpp"

namespace ddprun::launcher {
namespace {
namespace fs = std::filesystem;

LaunchPlan planFor(std::vector<std::string> args) {
  auto parsed = parse(std::move(args));
  EXPECT_TRUE(parsed.config.has_value());
  return resolveLaunchPlan(*parsed.config, MachineFacts{{0, "none"}, 2});
}

/// The lines of the run's attempts.jsonl under `logDir` (one run directory).
std::vector<std::string> attemptLines(const std::string& logDir) {
  std::vector<std::string> lines;
  for (const auto& run : fs::directory_iterator(logDir)) {
    std::ifstream in(run.path() / "attempts.jsonl");
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  return lines;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(Agent, AFailedAttemptIsRecordedAndTheGroupRestartsUntilItSucceeds) {
  const std::string logDir = test::makeTempDir("agent-log");
  OrphanGuard guard(DDPRUN_DDPRUN_ORPHAN_GUARD_BIN);
  // Rank 1 fails in the first attempt only; every rank sees its attempt's number as torchrun gives it.
  Agent agent(planFor({"--nproc-per-node", "2", "--max-restarts", "2", "--log-dir", logDir, "sh", "-c",
                       "[ \"$TORCHELASTIC_RESTART_COUNT$LOCAL_RANK\" = 01 ] && exit 3; exit 0"}),
              guard);
  EXPECT_EQ(agent.run(), 0);
  const auto lines = attemptLines(logDir);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_TRUE(has(lines[0], "\"reason\":\"failure\"")) << lines[0];
  EXPECT_TRUE(has(lines[1], "\"reason\":\"success\"")) << lines[1];
}

TEST(Agent, OutOfRestartsTheJobFailsWithOneAndEveryAttemptIsRecorded) {
  const std::string logDir = test::makeTempDir("agent-log");
  OrphanGuard guard(DDPRUN_DDPRUN_ORPHAN_GUARD_BIN);
  Agent agent(planFor({"--nproc-per-node", "1", "--max-restarts", "1", "--log-dir", logDir, "sh", "-c", "exit 7"}),
              guard);
  EXPECT_EQ(agent.run(), 1);
  const auto lines = attemptLines(logDir);
  ASSERT_EQ(lines.size(), 2u);
  for (const auto& line : lines) EXPECT_TRUE(has(line, "\"reason\":\"failure\"")) << line;
}

}  // namespace
}  // namespace ddprun::launcher
