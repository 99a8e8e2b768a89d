// ddprun under a real Slurm: Debian's slurmctld and two slurmd on this machine, each node in its own network
// namespace with its own host name (tools/slurm/local-cluster.sh), running tools/slurm/ddprun-cpu.sbatch as a
// user would submit it. Checks that 2 nodes x 2 ranks train to the same parameters as one node of 4 ranks, that
// ddprun took its rendezvous settings from Slurm's variables, and that `scancel --signal=USR1` reaches every
// worker once (Slurm signals every process of the step; ddprun forwards only what Slurm did not deliver) while
// the job goes on.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>

#include "support/child_process.hpp"
#include "support/wait_until.hpp"
#include "support/worker_runs.hpp"

namespace ddprun::worker {
namespace fs = std::filesystem;
using namespace std::chrono_literals;
namespace {

const std::string kDdprun = DDPRUN_BIN;
const std::string kSource = DDPRUN_SOURCE_DIR;
const std::string kCluster = kSource + "/tools/slurm/local-cluster.sh";
const std::string kSbatch = kSource + "/tools/slurm/ddprun-cpu.sbatch";
// One intra-op thread: bit-equality with the one-node run needs the same summation order inside matmul.
const std::map<std::string, std::string> kEnv{{"OMP_NUM_THREADS", "1"}};

/// How many live children of `parent` are named `name` (/proc/<pid>/stat: "pid (comm) state ppid ...").
size_t childrenNamed(pid_t parent, const std::string& name) {
  size_t count = 0;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string stat = test::readFile(entry.path().string() + "/stat");
    const auto open = stat.find('('), close = stat.rfind(')');
    const auto fields = test::procStatFields(stat);
    if (open == std::string::npos || fields.size() < 2) continue;
    if (std::atoi(fields[1].c_str()) == parent && fields[0] != "Z" && stat.substr(open + 1, close - open - 1) == name)
      ++count;
  }
  return count;
}

/// One Slurm cluster for the whole suite (starting it takes about 2 s; jobs do not share files).
class SlurmTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = test::makeTempDir("ddprun-slurm");
    if (::geteuid() != 0) {
      error_ = "needs root (network namespaces, Slurm's daemons)";
      return;
    }
    const std::map<std::string, std::string> net{{"LOCAL_CLUSTER_NET", std::to_string(100 + ::getpid() % 150)}};
    auto r = test::runProcess("/bin/bash", {kCluster, "start", dir_ + "/cluster"}, net, 90s);
    if (r.exitCode != 0) error_ = "the local Slurm cluster did not start:\n" + r.output + clusterLogs();
  }
  static void TearDownTestSuite() {
    auto r = test::runProcess("/bin/bash", {kCluster, "stop", dir_ + "/cluster"}, {}, 60s);
    EXPECT_EQ(r.exitCode, 0) << r.output;
    if (!::testing::Test::HasFailure()) fs::remove_all(dir_);
  }
  void SetUp() override {
    // Not a skip: tools/setup.sh installs Slurm and CI runs as root, so a cluster that does not start is a defect.
    ASSERT_TRUE(error_.empty()) << error_;
  }

  static std::string clusterLogs() {
    std::string logs;
    for (const char* name : {"slurmctld.log", "slurmd-sn1.log", "slurmd-sn2.log", "munged.log"}) {
      logs += std::string("\n--- ") + name + "\n" + test::readFile(dir_ + "/cluster/" + name);
    }
    return logs;
  }

  /// A Slurm client command (sbatch, squeue, scancel) run in the controller's namespace from `cwd`.
  static std::vector<std::string> client(const std::string& cwd, std::vector<std::string> command) {
    std::vector<std::string> args{"-C", cwd, "/bin/bash", kCluster, "run", dir_ + "/cluster"};
    args.insert(args.end(), command.begin(), command.end());
    return args;
  }

  /// `sbatch --wait` of ddprun-cpu.sbatch from `jobDir`, with `env` for the script; the job's output goes to
  /// jobDir/job.out. Returns the running sbatch, which exits when the job has ended, with the job's exit code.
  static test::ChildProcess submit(const std::string& jobDir, std::map<std::string, std::string> env) {
    fs::create_directories(jobDir);
    env["DDPRUN"] = kDdprun;
    env["WORKER"] = DDPRUN_WORKER_BIN;
    env["DATA_DIR"] = kSource + "/data/mnist";
    env.insert(kEnv.begin(), kEnv.end());
    return test::ChildProcess("/usr/bin/env",
                              client(jobDir, {"sbatch", "--wait", "--output", jobDir + "/job.out", kSbatch}), env);
  }

  /// The job id sbatch printed ("Submitted batch job N"), or "" when it has not yet.
  static std::string jobId(const test::ChildProcess& sbatch) {
    std::smatch m;
    const std::string out = sbatch.outputSoFar();
    return std::regex_search(out, m, std::regex("Submitted batch job ([0-9]+)")) ? m[1].str() : "";
  }

  static inline std::string dir_;
  static inline std::string error_;
};

TEST_F(SlurmTest, TwoNodesOfTwoRanksTrainLikeOneNodeWithSettingsFromSlurm) {
  const std::string jobDir = dir_ + "/train";
  auto sbatch = submit(jobDir, {{"CHECKPOINT_DIR", jobDir + "/ck"}, {"EPOCHS", "1"}});
  auto one = test::runProcess(
      kDdprun,
      test::concat({"--standalone", "--nproc-per-node", "4"}, test::workerArgs(dir_ + "/one", {"--epochs", "1"})), kEnv,
      180s);
  ASSERT_EQ(one.exitCode, 0) << one.output;
  auto r = sbatch.wait(300s);
  const std::string out = test::readFile(jobDir + "/job.out");
  ASSERT_EQ(r.exitCode, 0) << r.output << "\n--- job output\n" << out << clusterLogs();
  const std::string id = jobId(sbatch);
  ASSERT_FALSE(id.empty()) << r.output;

  // Each node's ddprun says what it took from Slurm; the script passes no rendezvous flag but the backend.
  for (const std::string rank : {"0", "1"}) {
    EXPECT_NE(out.find("ddprun: from Slurm's environment: --nnodes 2, --node-rank " + rank +
                       ", --rdzv-endpoint sn1, --rdzv-id " + id),
              std::string::npos)
        << out;
  }
  EXPECT_NE(out.find("rendezvous '" + id + "' on the c10d store at sn1:29400"), std::string::npos) << out;
  EXPECT_NE(out.find("world size 4, this node is group rank 0"), std::string::npos) << out;
  EXPECT_NE(out.find("world size 4, this node is group rank 1"), std::string::npos) << out;
  // The workers of the second node ran in its namespace (host name sn2) and reached the first over the bridge.
  EXPECT_NE(out.find("MASTER_ADDR=sn1"), std::string::npos) << out;
  EXPECT_EQ(test::maxAbsDiffOfFinalModels(dir_ + "/one", jobDir + "/ck"), 0.0);
}

TEST_F(SlurmTest, ScancelSignalUsr1ReachesEveryWorkerOnceAndTheJobGoesOn) {
  const std::string jobDir = dir_ + "/usr1";
  auto sbatch =
      submit(jobDir, {{"PROGRAM", test::pythonExe() + " " + kSource + "/tests/scripts/usr1_worker.py " + jobDir}});
  const auto file = [&](const std::string& name, int rank) { return jobDir + "/" + name + "-" + std::to_string(rank); };
  const auto all = [&](const std::function<bool(int)>& holds) {
    for (int rank = 0; rank < 4; ++rank) {
      if (!holds(rank)) return false;
    }
    return true;
  };
  // ready-<rank> holds "<host> <parent pid>": the ddprun that started the rank.
  const auto ddprunOf = [&](int rank) {
    std::istringstream line(test::readFile(file("ready", rank)));
    std::string host;
    pid_t parent = 0;
    line >> host >> parent;
    return parent;
  };
  const auto signalsOf = [&](int rank) { return test::occurrences(test::readFile(file("usr1", rank)), "\n"); };
  const auto jobOutput = [&] {
    return sbatch.outputSoFar() + "\n--- job output\n" + test::readFile(jobDir + "/job.out");
  };

  const auto ready = [&] { return all([&](int rank) { return fs::exists(file("ready", rank)); }); };
  ASSERT_TRUE(test::waitUntil([&] { return ready() || !sbatch.running(); }, 120s) && ready())
      << jobOutput() << clusterLogs();
  const std::string id = jobId(sbatch);
  ASSERT_FALSE(id.empty()) << sbatch.outputSoFar();

  // Slurm signals every process of the step, the workers included: each worker gets it once, from Slurm, and
  // ddprun does not add a second copy.
  auto scancel = test::runProcess("/usr/bin/env", client(jobDir, {"scancel", "--signal=USR1", id}), {}, 30s);
  ASSERT_EQ(scancel.exitCode, 0) << scancel.output;
  ASSERT_TRUE(test::waitUntil([&] { return all([&](int rank) { return signalsOf(rank) >= 1; }); }, 30s)) << jobOutput();
  const std::string notAgain = "received SIGUSR1 from Slurm, which signals every process of the job step";
  ASSERT_TRUE(
      test::waitUntil([&] { return test::occurrences(test::readFile(jobDir + "/job.out"), notAgain) == 2; }, 30s))
      << jobOutput();

  // ddprun's orphan guard (ddprun-orphan-guard, a child of ddprun; its name cut to the kernel's 15 characters) was in
  // the step too, and is still there to guard the workers.
  EXPECT_EQ(childrenNamed(ddprunOf(0), "ddprun-orphan-g"), 1u) << jobOutput();

  // The same signal sent to rank 0's ddprun alone (a user's kill, not Slurm's) is forwarded to that node's workers.
  const pid_t ddprun = ddprunOf(0);
  ASSERT_GT(ddprun, 0) << test::readFile(file("ready", 0));
  ASSERT_EQ(ddprunOf(1), ddprun) << "ranks 0 and 1 should share a node";
  ASSERT_EQ(::kill(ddprun, SIGUSR1), 0);
  ASSERT_TRUE(test::waitUntil([&] { return signalsOf(0) == 2 && signalsOf(1) == 2; }, 30s)) << jobOutput();

  std::ofstream(jobDir + "/stop").put('\n');
  auto r = sbatch.wait(120s);
  const std::string out = test::readFile(jobDir + "/job.out");
  // Every worker ended on its own (exit 0): the job completed, nothing was stopped or restarted.
  EXPECT_EQ(r.exitCode, 0) << r.output << "\n--- job output\n" << out;
  EXPECT_EQ(signalsOf(0), 2u) << out;
  EXPECT_EQ(signalsOf(1), 2u) << out;
  EXPECT_EQ(signalsOf(2), 1u) << out;
  EXPECT_EQ(signalsOf(3), 1u) << out;
  EXPECT_EQ(test::occurrences(out, "received SIGUSR1; forwarding it to the workers (--signals-to-handle)"), 1u) << out;
  EXPECT_EQ(out.find("stopping the workers"), std::string::npos) << out;
  EXPECT_EQ(out.find("restart"), std::string::npos) << out;
  // Ranks 0-1 on one node and 2-3 on the other, each in its own namespace (which is group rank 0 is the
  // rendezvous's choice).
  std::vector<std::string> hosts;
  for (int rank = 0; rank < 4; ++rank) hosts.push_back(test::readFile(file("usr1", rank)).substr(0, 3));
  EXPECT_TRUE(hosts[0] == hosts[1] && hosts[2] == hosts[3] && hosts[0] != hosts[2]) << out;
}

}  // namespace
}  // namespace ddprun::worker
