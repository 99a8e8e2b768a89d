// Scheduler defaults: Slurm's compressed host lists and the flags its environment fills in. No Slurm here:
// the environment is a map, with the values srun sets (names from srun(1) "OUTPUT ENVIRONMENT VARIABLES").
#include <gtest/gtest.h>

#include <map>

#include "common/error.hpp"
#include "launcher/config/scheduler_env.hpp"

namespace ddprun::launcher {
namespace {

EnvLookup envOf(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

/// The ConfigError message `call` throws, or a note that it did not throw.
template <typename Call>
std::string errorOf(Call call) {
  try {
    call();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "<no ConfigError>";
}

TEST(FirstHostOfNodelist, TakesTheFirstHostOfEachForm) {
  EXPECT_EQ(firstHostOfNodelist("host"), "host");
  EXPECT_EQ(firstHostOfNodelist("gnode[10,20-25]"), "gnode10");
  EXPECT_EQ(firstHostOfNodelist("gnode[10,20,25,37]"), "gnode10");
  EXPECT_EQ(firstHostOfNodelist("a[001-004]"), "a001");
  EXPECT_EQ(firstHostOfNodelist("n1,n2"), "n1");
  EXPECT_EQ(firstHostOfNodelist("rack[1-2]-n[3-4]"), "rack1-n3");
  EXPECT_EQ(firstHostOfNodelist("gpu-a[07-08],gpu-b[1-3]"), "gpu-a07");
  EXPECT_EQ(firstHostOfNodelist("x[5]"), "x5");
  EXPECT_EQ(firstHostOfNodelist("node[9-10].cluster"), "node9.cluster");
  EXPECT_EQ(firstHostOfNodelist("n[2-2]"), "n2");
  EXPECT_EQ(firstHostOfNodelist("n[0009-0011]"), "n0009");
  EXPECT_EQ(firstHostOfNodelist(" n1,n2\n"), "n1");  // hand-set values may carry a newline
}

TEST(FirstHostOfNodelist, MalformedListsNameTheVariableAndTheText) {
  for (const std::string bad :
       {"",      "   ",   "gnode[1-2", "gnode1-2]", "a[[1]]", "a[1-2]]", "a[]",    "a[1,]", "a[,1]",     "a[x]",
        "a[1-]", "a[-2]", "a[3-1]",    "a[1-2-3]",  ",n1",    "n1,",     "n1,,n2", "n1 n2", "n1,n2[1-3", "n1,n2[b]"}) {
    const std::string message = errorOf([&] { firstHostOfNodelist(bad); });
    EXPECT_NE(message.find("SLURM_JOB_NODELIST"), std::string::npos) << "'" << bad << "': " << message;
    EXPECT_NE(message.find("'" + bad + "'"), std::string::npos) << "'" << bad << "': " << message;
  }
  EXPECT_NE(errorOf([] { firstHostOfNodelist("gnode[1-2"); }).find("unbalanced"), std::string::npos);
  EXPECT_NE(errorOf([] { firstHostOfNodelist("a[3-1]"); }).find("backwards"), std::string::npos);
  EXPECT_NE(errorOf([] { firstHostOfNodelist("a[", "SLURM_STEP_NODELIST"); }).find("SLURM_STEP_NODELIST"),
            std::string::npos);
}

TEST(SlurmDefaults, NotUnderSlurmGivesNothing) {
  // Without a job id, stray variables (a login shell with SLURM_NNODES exported by hand) are ignored.
  const SchedulerDefaults d = slurmDefaults(
      envOf({{"SLURM_NNODES", "4"}, {"SLURM_NODEID", "1"}, {"SLURM_JOB_NODELIST", "n[1-4]"}, {"SLURM_JOB_ID", ""}}));
  EXPECT_FALSE(d.nnodes);
  EXPECT_FALSE(d.nodeRank);
  EXPECT_FALSE(d.rdzvEndpointHost);
  EXPECT_FALSE(d.rdzvId);
  EXPECT_EQ(d.source, "");
}

TEST(SlurmDefaults, AnSrunTaskFillsEveryField) {
  // What srun --nodes=2 --ntasks-per-node=1 gives the task on the second node.
  const SchedulerDefaults d = slurmDefaults(envOf({{"SLURM_JOB_ID", "4242"},
                                                   {"SLURM_JOBID", "4242"},
                                                   {"SLURM_NNODES", "2"},
                                                   {"SLURM_JOB_NUM_NODES", "2"},
                                                   {"SLURM_NODEID", "1"},
                                                   {"SLURM_PROCID", "1"},
                                                   {"SLURM_JOB_NODELIST", "gnode[10,20]"},
                                                   {"SLURM_STEP_NODELIST", "gnode[10,20]"},
                                                   {"SLURM_NODELIST", "gnode[10,20]"}}));
  EXPECT_EQ(d.source, "Slurm");
  EXPECT_EQ(d.nnodes, "2");
  EXPECT_EQ(d.nodeRank, 1);
  EXPECT_EQ(d.rdzvEndpointHost, "gnode10");
  EXPECT_EQ(d.rdzvId, "4242");
}

TEST(SlurmDefaults, FallsBackToTheOlderOrJobWideNames) {
  const SchedulerDefaults d =
      slurmDefaults(envOf({{"SLURM_JOBID", "77"}, {"SLURM_JOB_NUM_NODES", "3"}, {"SLURM_NODELIST", "c[001-003]"}}));
  EXPECT_EQ(d.source, "Slurm");
  EXPECT_EQ(d.rdzvId, "77");
  EXPECT_EQ(d.nnodes, "3");
  EXPECT_FALSE(d.nodeRank);
  EXPECT_EQ(d.rdzvEndpointHost, "c001");
}

TEST(SlurmDefaults, TheStepsNodeListWinsOverTheJobs) {
  // srun --nodes=2 inside a 4-node allocation: SLURM_NNODES and SLURM_NODEID describe the step, so the
  // endpoint must be a node of the step too.
  const SchedulerDefaults d = slurmDefaults(envOf({{"SLURM_JOB_ID", "9"},
                                                   {"SLURM_NNODES", "2"},
                                                   {"SLURM_NODEID", "0"},
                                                   {"SLURM_JOB_NODELIST", "n[1-4]"},
                                                   {"SLURM_STEP_NODELIST", "n[3-4]"}}));
  EXPECT_EQ(d.rdzvEndpointHost, "n3");
  EXPECT_EQ(d.nodeRank, 0);
}

TEST(SlurmDefaults, OnlyTheJobIdSetGivesOnlyTheId) {
  const SchedulerDefaults d = slurmDefaults(envOf({{"SLURM_JOB_ID", "5"}}));
  EXPECT_EQ(d.source, "Slurm");
  EXPECT_EQ(d.rdzvId, "5");
  EXPECT_FALSE(d.nnodes);
  EXPECT_FALSE(d.nodeRank);
  EXPECT_FALSE(d.rdzvEndpointHost);
}

TEST(SlurmDefaults, BadValuesNameTheVariable) {
  auto errorFor = [](std::map<std::string, std::string> vars) {
    vars.emplace("SLURM_JOB_ID", "1");
    return errorOf([&] { slurmDefaults(envOf(vars)); });
  };
  EXPECT_NE(errorFor({{"SLURM_NNODES", "two"}}).find("SLURM_NNODES"), std::string::npos);
  EXPECT_NE(errorFor({{"SLURM_NNODES", "0"}}).find("SLURM_NNODES"), std::string::npos);
  EXPECT_NE(errorFor({{"SLURM_NNODES", "2x"}}).find("SLURM_NNODES"), std::string::npos);
  EXPECT_NE(errorFor({{"SLURM_JOB_NUM_NODES", "-3"}}).find("SLURM_JOB_NUM_NODES"), std::string::npos);
  EXPECT_NE(errorFor({{"SLURM_NNODES", "99999999999"}}).find("SLURM_NNODES"), std::string::npos);
  EXPECT_NE(errorFor({{"SLURM_NODEID", "-1"}}).find("SLURM_NODEID"), std::string::npos);
  EXPECT_NE(errorFor({{"SLURM_NODEID", "1.5"}}).find("SLURM_NODEID"), std::string::npos);
  const std::string pastTheEnd = errorFor({{"SLURM_NNODES", "2"}, {"SLURM_NODEID", "2"}});
  EXPECT_NE(pastTheEnd.find("SLURM_NODEID"), std::string::npos) << pastTheEnd;
  EXPECT_NE(pastTheEnd.find("SLURM_NNODES=2"), std::string::npos) << pastTheEnd;
  const std::string badList = errorFor({{"SLURM_STEP_NODELIST", "n[1-"}});
  EXPECT_NE(badList.find("SLURM_STEP_NODELIST"), std::string::npos) << badList;
  EXPECT_NE(badList.find("'n[1-'"), std::string::npos) << badList;
}

TEST(SchedulerEnv, OnlySlurmsStepDaemonSignalsTheWholeStep) {
  // slurmstepd's comm; its command line reads "slurmstepd: [42.0]" but /proc/<pid>/comm keeps the name.
  EXPECT_TRUE(signalReachedTheWholeStep("slurmstepd"));
  // A user's kill, the batch shell, srun itself, a sender already gone: only ddprun got it.
  EXPECT_FALSE(signalReachedTheWholeStep("bash"));
  EXPECT_FALSE(signalReachedTheWholeStep("srun"));
  EXPECT_FALSE(signalReachedTheWholeStep("slurmd"));
  EXPECT_FALSE(signalReachedTheWholeStep(""));
}

}  // namespace
}  // namespace ddprun::launcher
