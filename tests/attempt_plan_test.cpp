// AttemptPlan: from a round and an attempt to each rank's launch, without processes or files.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "launcher/attempt_plan.hpp"
#include "launcher/config/launch_config.hpp"
#include "launcher/config/launch_plan.hpp"
#include "support/launch_args.hpp"

namespace ddprun::launcher {
namespace {

LaunchPlan planFor(std::vector<std::string> args) {
  auto parsed = parse(std::move(args));
  EXPECT_TRUE(parsed.config.has_value());
  return resolveLaunchPlan(*parsed.config, MachineFacts{{0, "none"}, 4});
}

rendezvous::RoundAssignment secondNodeOfTwo() {
  rendezvous::RoundAssignment round;
  round.round = 3;
  round.groupRank = 1;
  round.groupWorldSize = 2;
  round.rankOffset = 2;
  round.worldSize = 4;
  round.masterAddr = "10.0.0.1";
  round.masterPort = 29400;
  return round;
}

TEST(AttemptPlan, EachRankGetsTorchrunsVariablesForItsRoundAndAttempt) {
  const LaunchPlan config = planFor({"--nproc-per-node", "2", "prog", "--flag"});
  AttemptPlan plan(config, makeWorkerSpec(config), "/run", {});
  const auto members = plan.members(secondNodeOfTwo(), {3, 0});
  ASSERT_EQ(members.size(), 2u);
  const auto& env = members[1].launch.env;
  EXPECT_EQ(members[1].globalRank, 3);
  EXPECT_EQ(env.at("RANK"), "3");
  EXPECT_EQ(env.at("LOCAL_RANK"), "1");
  EXPECT_EQ(env.at("GROUP_RANK"), "1");
  EXPECT_EQ(env.at("WORLD_SIZE"), "4");
  EXPECT_EQ(env.at("LOCAL_WORLD_SIZE"), "2");
  EXPECT_EQ(env.at("MASTER_ADDR"), "10.0.0.1");
  EXPECT_EQ(env.at("MASTER_PORT"), "29400");
  EXPECT_EQ(env.at("TORCHELASTIC_RESTART_COUNT"), "3");
  EXPECT_EQ(env.count("DDPRUN_RESTART_SCOPE"), 0u);
  EXPECT_EQ(env.count("DDPRUN_COMM_GENERATION"), 0u);
  EXPECT_EQ(members[1].launch.command, (std::vector<std::string>{"prog", "--flag"}));
  EXPECT_TRUE(members[0].launch.inheritStdin) << "pdb and input() on local rank 0, as under torchrun";
  EXPECT_FALSE(members[1].launch.inheritStdin);
  EXPECT_EQ(members[1].errorFile, plan.logPaths(3, 1).errorFile);
  EXPECT_EQ(env.at("TORCHELASTIC_ERROR_FILE"), members[1].errorFile);
}

TEST(AttemptPlan, AReplacementIsOneRankInTheNextGenerationBesideTheReplacedRanksFiles) {
  const LaunchPlan config = planFor({"--nproc-per-node", "2", "--redirects", "3", "prog"});
  AttemptPlan plan(config, makeWorkerSpec(config), "/run", {});
  plan.replaceRanks(true);
  const auto first = plan.member(secondNodeOfTwo(), {3, 0}, 1);
  const auto replacement = plan.member(secondNodeOfTwo(), {3, 2}, 1);
  EXPECT_EQ(replacement.launch.env.at("DDPRUN_RESTART_SCOPE"), "rank");
  EXPECT_EQ(replacement.launch.env.at("DDPRUN_COMM_GENERATION"), "2");
  EXPECT_EQ(replacement.launch.env.at("RANK"), "3");
  EXPECT_EQ(replacement.errorFile, first.errorFile + ".generation_2");
  EXPECT_EQ(replacement.launch.env.at("TORCHELASTIC_ERROR_FILE"), replacement.errorFile);
  ASSERT_FALSE(first.launch.output.stdoutFile.empty());
  EXPECT_EQ(replacement.launch.output.stdoutFile, first.launch.output.stdoutFile + ".generation_2");
  EXPECT_EQ(replacement.launch.output.stderrFile, first.launch.output.stderrFile + ".generation_2");
}

TEST(AttemptPlan, NumaBindingAndWatchFilesPerLocalRank) {
  const LaunchPlan config = planFor({"--nproc-per-node", "2", "prog"});
  AttemptPlan plan(config, makeWorkerSpec(config), "/run", {{{0, 1}, 0}, {{2, 3}, 1}});
  const auto members = plan.members(secondNodeOfTwo(), {0, 0});
  EXPECT_EQ(members[1].launch.cpus, (std::vector<int>{2, 3}));
  EXPECT_EQ(members[1].launch.memoryNode, 1);
  const auto files = plan.rankFiles(secondNodeOfTwo(), 5);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[1].progress, plan.logPaths(5, 1).progressFile);
  EXPECT_EQ(files[1].stacks, plan.logPaths(5, 1).stacksFile);
  EXPECT_NE(files[0].progress, files[1].progress);
}

}  // namespace
}  // namespace ddprun::launcher
