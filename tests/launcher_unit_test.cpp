// ddprun's pure parts: command line and config file, GPU counting, worker environment and command,
// failure summary.
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "common/error.hpp"
#include "common/error_file.hpp"
#include "launcher/config/gpu_count.hpp"
#include "launcher/config/launch_config.hpp"
#include "launcher/config/launch_plan.hpp"
#include "launcher/config/python_entry.hpp"
#include "launcher/log_layout.hpp"
#include "launcher/process/numa_binding.hpp"
#include "launcher/watch/failure_summary.hpp"
#include "launcher/worker_env.hpp"
#include "support/child_process.hpp"

namespace ddprun::launcher {
namespace fs = std::filesystem;
namespace {

ParseOutcome parse(std::vector<std::string> args) {
  args.insert(args.begin(), "ddprun");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return parseLaunchArgs(static_cast<int>(argv.size()), argv.data());
}

TEST(LaunchArgs, AcceptsBothSpellingsAndKeepsTheProgramsOwnFlags) {
  for (const std::string flag : {"--nproc-per-node", "--nproc_per_node"}) {
    auto out = parse({flag, "4", "--max_restarts=2", "--rdzv-conf", "join_timeout=5,is_host=1", "worker", "--epochs",
                      "3", "--nproc-per-node", "9"});
    ASSERT_TRUE(out.config.has_value()) << flag;
    EXPECT_EQ(out.config->nprocPerNode, "4");
    EXPECT_EQ(out.config->maxRestarts, 2);
    EXPECT_EQ(out.config->rdzvConf.at("join_timeout"), "5");
    EXPECT_EQ(out.config->program, "worker");
    EXPECT_EQ(out.config->programArgs, (std::vector<std::string>{"--epochs", "3", "--nproc-per-node", "9"}));
  }
}

TEST(LaunchArgs, WrongFlagsAndValuesExitWith2) {
  testing::internal::CaptureStderr();
  EXPECT_EQ(parse({"--nproc-per-node"}).exitCode, 2);
  EXPECT_EQ(parse({"--bogus", "prog"}).exitCode, 2);
  EXPECT_EQ(parse({"--max-restarts", "-1", "prog"}).exitCode, 2);
  EXPECT_EQ(parse({"--nnodes", "3:2", "prog"}).exitCode, 2);
  EXPECT_EQ(parse({"--redirects", "7", "prog"}).exitCode, 2);
  EXPECT_EQ(parse({"--nproc-per-node", "2"}).exitCode, 2);  // no program
  EXPECT_EQ(parse({"--stop-timeout", "nan", "prog"}).exitCode, 2);
  EXPECT_EQ(parse({"--rdzv-backend", "etcd", "prog"}).exitCode, 2);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("unknown option '--bogus'"), std::string::npos) << err;
  EXPECT_NE(err.find("--nnodes"), std::string::npos) << err;
  EXPECT_NE(err.find("no program given"), std::string::npos) << err;
}

TEST(LaunchArgs, ConfigFileGivesDefaultsThatFlagsOverride) {
  const std::string dir = test::makeTempDir("cfg");
  const std::string path = dir + "/job.json";
  std::ofstream(path) << R"({"nproc-per-node": 3, "max_restarts": 1, "role": "trainer",
                             "program": "build/bin/worker", "args": ["--epochs", "2"]})";
  auto out = parse({"--config", path, "--max-restarts", "4"});
  ASSERT_TRUE(out.config.has_value());
  EXPECT_EQ(out.config->nprocPerNode, "3");
  EXPECT_EQ(out.config->maxRestarts, 4);
  EXPECT_EQ(out.config->role, "trainer");
  EXPECT_EQ(out.config->program, "build/bin/worker");
  EXPECT_EQ(out.config->programArgs, (std::vector<std::string>{"--epochs", "2"}));
  for (const auto& [json, message] : std::vector<std::pair<std::string, std::string>>{
           {R"({"nproc_per_node": 2, "colour": "blue"})", "unknown option 'colour'"},
           {R"({"standalone": "yes"})", "standalone: expected true or false"},
           {R"({"nproc_per_node": 2, "nproc-per-node": 3})", "given twice"},
           {R"({"max_restarts": 1, "max_restarts": 5})", "key 'max_restarts' given twice"},
           {R"({"args": [1, 2]})", path}}) {
    std::ofstream(path) << json;
    testing::internal::CaptureStderr();
    EXPECT_EQ(parse({"--config", path, "prog"}).exitCode, 2) << json;
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find(message), std::string::npos) << json << " -> " << err;
  }
  fs::remove_all(dir);
}

void setSlurmStep(const char* job, const char* nnodes, const char* nodeId, const char* nodelist) {
  ::setenv("SLURM_JOB_ID", job, 1);
  ::setenv("SLURM_NNODES", nnodes, 1);
  ::setenv("SLURM_NODEID", nodeId, 1);
  ::setenv("SLURM_JOB_NODELIST", nodelist, 1);
}

void clearSlurmStep() {
  for (const char* name : {"SLURM_JOB_ID", "SLURM_NNODES", "SLURM_NODEID", "SLURM_JOB_NODELIST"}) ::unsetenv(name);
}

TEST(LaunchArgs, TheShippedConfigsParse) {
  for (const auto& entry : fs::directory_iterator(DDPRUN_SOURCE_DIR "/configs")) {
    // The Slurm example takes its node count, endpoint and job id from an srun step's environment.
    const bool slurm = entry.path().filename().string().rfind("slurm", 0) == 0;
    if (slurm) setSlurmStep("4242", "2", "1", "gpu[07-08]");
    auto out = parse({"--config", entry.path().string()});
    if (slurm) clearSlurmStep();
    ASSERT_TRUE(out.config.has_value()) << entry.path();
    if (slurm) {
      EXPECT_EQ(out.config->mode, RendezvousMode::kDynamic);
      EXPECT_EQ(out.config->rdzvHost, "gpu07");
      EXPECT_EQ(out.config->rdzvPort, 29400);
      EXPECT_EQ(out.config->rdzvId, "4242");
      EXPECT_EQ(out.config->minNodes, 2);
    }
  }
}

TEST(LaunchArgs, MultiNodeModesAndTheirRequiredFlags) {
  auto dynamic = parse({"--nnodes", "2:4", "--rdzv-backend", "c10d", "--rdzv-endpoint", "head", "prog"});
  ASSERT_TRUE(dynamic.config);
  EXPECT_EQ(dynamic.config->mode, RendezvousMode::kDynamic);
  EXPECT_EQ(dynamic.config->rdzvHost, "head");
  EXPECT_EQ(dynamic.config->rdzvPort, 29400);
  auto etcd = parse({"--nnodes", "2", "--rdzv-backend", "etcd-v3", "--rdzv-endpoint", "[::1]", "prog"});
  ASSERT_TRUE(etcd.config);
  EXPECT_EQ(etcd.config->rdzvHost, "::1");
  EXPECT_EQ(etcd.config->rdzvPort, 2379);
  auto fixed =
      parse({"--nnodes", "3", "--node-rank", "2", "--master-addr", "10.0.0.1", "--master-port", "1234", "prog"});
  // One node: a free port unless one is given, the endpoint's port 0 too; a node that serves the store needs an
  // address that resolves.
  auto single = parse({"prog"});
  ASSERT_TRUE(single.config);
  EXPECT_EQ(single.config->mode, RendezvousMode::kSingleNode);
  EXPECT_EQ(single.config->masterPort, 0);
  EXPECT_EQ(parse({"--master-port", "29501", "prog"}).config->masterPort, 29501);
  auto zero = parse({"--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0", "prog"});
  ASSERT_TRUE(zero.config);
  EXPECT_EQ(zero.config->mode, RendezvousMode::kSingleNode);
  EXPECT_EQ(zero.config->masterPort, 0);
  EXPECT_EQ(parse({"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0", "prog"}).exitCode, 2);
  EXPECT_EQ(parse({"--master-addr", "no-such-host.invalid", "prog"}).exitCode, 2);
  EXPECT_EQ(parse({"--nnodes", "2", "--node-rank", "1", "--master-addr", "no-such-host.invalid", "prog"}).exitCode, 0)
      << "another node's address is its own business";
  ASSERT_TRUE(fixed.config);
  EXPECT_EQ(fixed.config->mode, RendezvousMode::kStatic);
  EXPECT_EQ(parse({"--standalone", "prog"}).config->mode, RendezvousMode::kSingleNode);
  // Each wrong combination is refused with exit code 2.
  EXPECT_EQ(parse({"--nnodes", "1:2", "prog"}).exitCode, 2);                          // static needs a fixed count
  EXPECT_EQ(parse({"--nnodes", "2", "--node-rank", "2", "prog"}).exitCode, 2);        // rank out of range
  EXPECT_EQ(parse({"--nnodes", "2", "--rdzv-backend", "c10d", "prog"}).exitCode, 2);  // no endpoint
  EXPECT_EQ(parse({"--rdzv-backend", "etcd", "--rdzv-endpoint", "h:2379", "prog"}).exitCode, 2);  // v2 API
  EXPECT_EQ(parse({"--rdzv-backend", "c10d", "--rdzv-endpoint", "h:99999", "prog"}).exitCode, 2);
  EXPECT_EQ(
      parse({"--rdzv-backend", "c10d", "--rdzv-endpoint", "h:1", "--rdzv-conf", "join_timout=5", "prog"}).exitCode, 2);
  EXPECT_EQ(parse({"--nnodes", "2", "--no-agent-store", "prog"}).exitCode, 2);  // static nodes share node 0's store
  EXPECT_EQ(parse({"--nnodes", "2", "--master-port", "0", "prog"}).exitCode, 2);
  // Static takes --rdzv-endpoint over --master-addr/--master-port, as torchrun does.
  auto endpoint = parse({"--nnodes", "2", "--rdzv-endpoint", "127.0.0.9:4000", "--master-addr", "x", "prog"});
  ASSERT_TRUE(endpoint.config);
  EXPECT_EQ(endpoint.config->masterAddr, "127.0.0.9");
  EXPECT_EQ(endpoint.config->masterPort, 4000);
  // A repeated option: the last one counts (argparse).
  EXPECT_EQ(parse({"--nproc-per-node", "2", "--nproc-per-node", "3", "prog"}).config->nprocPerNode, "3");
}

TEST(LaunchArgs, Torchrun2OptionsAndTheirValues) {
  auto all = parse({"--shutdown-timeout", "7", "--signals-to-handle", "SIGTERM,usr1,12", "--numa-binding", "socket",
                    "--virtual-local-rank", "--duplicate-stdout-filters", "a,,b,c", "--duplicate-stderr-filters", "",
                    "--event-log-handler", "console", "--logs-specs", "DefaultLogsSpecs", "--", "prog", "--x"});
  ASSERT_TRUE(all.config);
  EXPECT_EQ(all.config->stopTimeout, 7);
  EXPECT_EQ(all.config->signalsToHandle, (std::vector<int>{SIGTERM, SIGUSR1, SIGUSR2}));
  EXPECT_EQ(all.config->numaBinding, "socket");
  EXPECT_TRUE(all.config->virtualLocalRank);
  EXPECT_EQ(all.config->duplicateStdoutFilters, (std::vector<std::string>{"a,b", "c"}));
  EXPECT_TRUE(all.config->duplicateStderrFilters.empty());
  EXPECT_EQ(all.config->eventLogHandler, "console");
  EXPECT_EQ(all.config->program, "prog");
  EXPECT_EQ(all.config->programArgs, std::vector<std::string>{"--x"});
  // torch 2.x's other event handler is a null one; its shutdown timeout's variable applies without the flag.
  EXPECT_EQ(parse({"--event-log-handler", "dynamic_rendezvous", "prog"}).config->eventLogHandler, "null");
  ::setenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "12", 1);
  EXPECT_EQ(parse({"prog"}).config->stopTimeout, 12);
  EXPECT_EQ(parse({"--shutdown-timeout", "3", "prog"}).config->stopTimeout, 3) << "the flag wins";
  ::setenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "soon", 1);
  testing::internal::CaptureStderr();
  EXPECT_EQ(parse({"prog"}).exitCode, 2);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("TORCH_ELASTIC_SHUTDOWN_TIMEOUT"), std::string::npos);
  ::unsetenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT");
  testing::internal::CaptureStderr();
  EXPECT_EQ(parse({"--signals-to-handle", "SIGKILL", "prog"}).exitCode, 2);
  EXPECT_EQ(parse({"--signals-to-handle", "SIGNOPE", "prog"}).exitCode, 2);
  EXPECT_EQ(parse({"--numa-binding", "nodes", "prog"}).exitCode, 2);
  EXPECT_EQ(parse({"--event-log-handler", "scuba", "prog"}).exitCode, 2);
  EXPECT_EQ(parse({"--logs-specs", "mine", "prog"}).exitCode, 2);
  EXPECT_EQ(parse({"--max-restart", "1", "--nnodes", "1", "--maxrestarts", "2", "prog"}).exitCode, 2);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("SIGKILL cannot be handled"), std::string::npos) << err;
  EXPECT_NE(err.find("unknown signal 'SIGNOPE'"), std::string::npos) << err;
  EXPECT_NE(err.find("unknown option '--maxrestarts'; did you mean --max-restarts?"), std::string::npos) << err;
}

TEST(LaunchArgs, RendezvousConfKeysAndValues) {
  auto conf = parseRendezvousConf({{"join_timeout", "20"},
                                   {"last_call_timeout", "0.5"},
                                   {"keep_alive_interval", "2"},
                                   {"keep_alive_max_attempt", "4"},
                                   {"is_host", "False"},
                                   {"use_libuv", "1"}});
  EXPECT_EQ(conf.joinTimeout, 20);
  EXPECT_EQ(conf.lastCallTimeout, 0.5);
  EXPECT_EQ(conf.keepAliveInterval, 2);
  EXPECT_EQ(conf.keepAliveMaxAttempt, 4);
  ASSERT_TRUE(conf.isHost);
  EXPECT_FALSE(*conf.isHost);
  EXPECT_THROW(parseRendezvousConf({{"join_timeout", "nan"}}), ConfigError);
  EXPECT_THROW(parseRendezvousConf({{"close_timeout", "-1"}}), ConfigError);
  EXPECT_THROW(parseRendezvousConf({{"keep_alive_interval", "0.0001"}}), ConfigError);  // would spin
  EXPECT_THROW(parseRendezvousConf({{"keep_alive_max_attempt", "0"}}), ConfigError);
  EXPECT_THROW(parseRendezvousConf({{"is_host", "maybe"}}), ConfigError);
  EXPECT_THROW(parseEndpoint("", 1, "--rdzv-endpoint"), ConfigError);
  EXPECT_THROW(parseEndpoint("h:x", 1, "--rdzv-endpoint"), ConfigError);
  EXPECT_EQ(parseEndpoint("h:7", 1, "--rdzv-endpoint"), (std::pair<std::string, int>{"h", 7}));
}

TEST(LaunchArgs, TorchrunsPetVariablesFillFlagsThatAreNotGiven) {
  ::setenv("PET_NNODES", "2:3", 1);
  ::setenv("PET_RDZV_BACKEND", "c10d", 1);
  ::setenv("PET_RDZV_ENDPOINT", "master-0:23456", 1);
  ::setenv("PET_NPROC_PER_NODE", "4", 1);
  auto out = parse({"--nproc-per-node", "2", "prog"});
  for (const char* name : {"PET_NNODES", "PET_RDZV_BACKEND", "PET_RDZV_ENDPOINT", "PET_NPROC_PER_NODE"})
    ::unsetenv(name);
  ASSERT_TRUE(out.config);
  EXPECT_EQ(out.config->maxNodes, 3);
  EXPECT_EQ(out.config->rdzvHost, "master-0");
  EXPECT_EQ(out.config->rdzvPort, 23456);
  EXPECT_EQ(out.config->nprocPerNode, "2");  // the flag wins over PET_NPROC_PER_NODE
}

TEST(LaunchArgs, SlurmFillsOnlyWhatTheCommandLineLeavesOut) {
  setSlurmStep("77", "3", "2", "n[1-3]");
  auto implicit = parse({"--rdzv-backend", "c10d", "prog"});
  auto explicitly =
      parse({"--rdzv-backend", "c10d", "--nnodes", "2", "--rdzv-endpoint", "head:1", "--rdzv-id", "x", "prog"});
  auto fixed = parse({"prog"});
  auto standalone = parse({"--standalone", "prog"});
  clearSlurmStep();
  ASSERT_TRUE(standalone.config);  // one node on purpose, inside an allocation too
  EXPECT_EQ(standalone.config->minNodes, 1);
  ASSERT_TRUE(implicit.config && explicitly.config && fixed.config);
  EXPECT_EQ(implicit.config->minNodes, 3);
  EXPECT_EQ(implicit.config->rdzvHost, "n1");
  EXPECT_EQ(implicit.config->rdzvId, "77");
  EXPECT_EQ(explicitly.config->minNodes, 2);
  EXPECT_EQ(explicitly.config->rdzvHost, "head");
  EXPECT_EQ(explicitly.config->rdzvId, "x");
  EXPECT_EQ(fixed.config->mode, RendezvousMode::kStatic);  // static: node rank and master address
  EXPECT_EQ(fixed.config->nodeRank, 2);
  EXPECT_EQ(fixed.config->masterAddr, "n1");
}

TEST(LaunchArgs, ArgparsePrefixesOfLongOptionsAsTorchrunUsersTypeThem) {
  auto out = parse({"--nproc", "2", "--max_re=3", "--stand", "prog", "--nproc", "9"});
  ASSERT_TRUE(out.config.has_value());
  EXPECT_EQ(out.config->nprocPerNode, "2");
  EXPECT_EQ(out.config->maxRestarts, 3);
  EXPECT_TRUE(out.config->standalone);
  EXPECT_EQ(out.config->programArgs, (std::vector<std::string>{"--nproc", "9"}));  // the program's own
  EXPECT_EQ(expandOptionPrefixes({"--log-d", "d", "-r", "3", "x"}),
            (std::vector<std::string>{"--log-dir", "d", "-r", "3", "x"}));
  EXPECT_THROW(expandOptionPrefixes({"--log", "d", "x"}), ConfigError)
      << "--log-dir or --logs-specs, as in torchrun 2.x";
  testing::internal::CaptureStderr();
  EXPECT_EQ(parse({"--no", "prog"}).exitCode, 2);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("ambiguous option: --no could match --node-rank, --no-python, --no-agent-store, --no-tty"),
            std::string::npos)
      << err;
}

TEST(LaunchArgs, AnEmptyProgramIsRefusedAndEmptyProgramArgumentsAreKept) {
  // CLI11 2.1 took "" for one of the nameless option groups, and the option after it then looped forever: the
  // program and its arguments no longer reach CLI11.
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--nnodes", "1", "", "--epochs", "3"}, std::vector<std::string>{"", "train.py"},
        std::vector<std::string>{"--", "", "-x"}}) {
    testing::internal::CaptureStderr();
    EXPECT_EQ(parse(args).exitCode, 2) << testing::PrintToString(args);
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("no program given"), std::string::npos) << err;
  }
  auto out = parse({"--log-dir", "", "--max-restarts", "2", "prog", "", "--max-restarts", "5", ""});
  ASSERT_TRUE(out.config.has_value());
  EXPECT_EQ(out.config->maxRestarts, 2);
  EXPECT_EQ(out.config->program, "prog");
  EXPECT_EQ(out.config->programArgs, (std::vector<std::string>{"", "--max-restarts", "5", ""}));
}

TEST(LaunchArgs, HelpShowsEveryOptionOnceInItsSection) {
  testing::internal::CaptureStdout();
  EXPECT_EQ(parse({"--help"}).exitCode, 0);
  const std::string help = testing::internal::GetCapturedStdout();
  EXPECT_EQ(help.find("[Option Group"), std::string::npos) << help;
  // The sections in order, each with one of its own options before the next section starts.
  const std::vector<std::pair<std::string, std::string>> sections{
      {"Nodes and rendezvous:", "--rdzv-endpoint"},
      {"Workers:", "--start-method"},
      {"Failures, restarts and stopping:", "--max-restarts"},
      {"Hangs and stragglers:", "--hang-timeout"},
      {"Logs and console:", "-t,--tee"},
      {"Status page:", "--status-port"}};
  size_t at = 0;
  for (const auto& [title, option] : sections) {
    const auto section = help.find("\n" + title + "\n", at);
    ASSERT_NE(section, std::string::npos) << title << " after offset " << at << ":\n" << help;
    const auto next = help.find(":\n  -", section + title.size() + 2);
    const auto where = help.find("  " + option, section);
    EXPECT_LT(where, next) << option << " under " << title;
    at = section + 1;
  }
  // CLI11 checks a repeated spelling only within a section (an option group); across them, this does.
  std::set<std::string> spellings;
  std::istringstream lines(help);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("  -", 0) != 0) continue;
    std::istringstream names(line.substr(2, line.find(' ', 2) - 2));
    for (std::string name; std::getline(names, name, ',');) {
      EXPECT_TRUE(spellings.insert(name).second) << name << " appears twice in --help";
    }
  }
  EXPECT_GE(spellings.size(), 80u) << help;
}

TEST(LaunchArgs, StartMethodAndNoTtyAreAccepted) {
  const std::vector<std::pair<const char*, StartMethod>> methods{
      {"spawn", StartMethod::kSpawn}, {"fork", StartMethod::kFork}, {"forkserver", StartMethod::kForkserver}};
  for (const auto& [method, expected] : methods) {
    auto out = parse({"--start-method", method, "--no-tty", "prog"});
    ASSERT_TRUE(out.config.has_value()) << method;
    EXPECT_EQ(out.config->startMethod, expected) << method;
    EXPECT_FALSE(out.config->allowTerminal);
  }
  EXPECT_EQ(parse({"--start_method", "thread", "prog"}).exitCode, 2);
}

/// Writes `json` to a config file and parses `--config file prog`; returns the exit code and stderr.
std::pair<int, std::string> parseConfig(const std::string& json) {
  const std::string dir = test::makeTempDir("cfgbad");
  std::ofstream(dir + "/c.json") << json;
  testing::internal::CaptureStderr();
  const int code = parse({"--config", dir + "/c.json", "prog"}).exitCode;
  const std::string err = testing::internal::GetCapturedStderr();
  fs::remove_all(dir);
  return {code, err};
}

TEST(LaunchArgs, EveryBadValueIsOneLineNamingTheOptionFromEverySource) {
  // The same validation for flags, --config values and PET_ variables; durations parsed one way.
  for (const auto& [json, name] : std::vector<std::pair<std::string, std::string>>{
           {R"({"monitor_interval": "abc"})", "monitor_interval"},
           {R"({"monitor_interval": "5s"})", "monitor_interval"},
           {R"({"stop_timeout": -1})", "stop_timeout"},
           {R"({"max_restarts": 4294967296})", "max_restarts"},
           {R"({"nnodes": 4294967297})", "nnodes"},
           {R"({"local_ranks_filter": "4294967296"})", "local_ranks_filter"},
           {R"({"standalone": "maybe"})", "standalone"},
           {R"({"role": ["a"]})", "role"}}) {
    auto [code, err] = parseConfig(json);
    EXPECT_EQ(code, 2) << json;
    EXPECT_NE(err.find(name), std::string::npos) << json << ": " << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  }
  auto [deepCode, deepErr] = parseConfig(std::string(100000, '[') + std::string(100000, ']'));
  EXPECT_EQ(deepCode, 2);
  EXPECT_NE(deepErr.find("nested deeper"), std::string::npos) << deepErr;
  testing::internal::CaptureStderr();
  EXPECT_EQ(parse({"--monitor-interval", "5s", "prog"}).exitCode, 2);
  EXPECT_EQ(parse({"--max-restarts", "4294967296", "prog"}).exitCode, 2);
  EXPECT_EQ(parse({"--nnodes", "4294967297", "prog"}).exitCode, 2);
  EXPECT_EQ(parse({"--local-ranks-filter", "4294967296", "prog"}).exitCode, 2);
  ::setenv("PET_MONITOR_INTERVAL", "5s", 1);
  EXPECT_EQ(parse({"prog"}).exitCode, 2);
  ::unsetenv("PET_MONITOR_INTERVAL");
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("--monitor-interval: expected a number of seconds"), std::string::npos) << err;
  EXPECT_NE(err.find("PET_MONITOR_INTERVAL: expected a number of seconds"), std::string::npos) << err;
  EXPECT_NE(err.find("--nnodes: 4294967297 is outside 1..100000"), std::string::npos) << err;
}

TEST(LaunchArgs, StandaloneGetsAFreshRunIdUnlessOneIsGiven) {
  auto a = parse({"--standalone", "prog"}), b = parse({"--standalone", "prog"});
  ASSERT_TRUE(a.config && b.config);
  EXPECT_EQ(a.config->rdzvId.size(), 36u);  // a uuid4, as torchrun's str(uuid.uuid4())
  EXPECT_NE(a.config->rdzvId, b.config->rdzvId);
  EXPECT_EQ(parse({"--standalone", "--rdzv-id", "mine", "prog"}).config->rdzvId, "mine");
}

TEST(PythonEntry, BinariesAndScriptsRunDirectlyEverythingElseUnderPython) {
  const std::string dir = test::makeTempDir("entry");
  std::ofstream(dir + "/train") << "import torch\nprint('no .py suffix')\n";
  std::ofstream(dir + "/run.sh") << "#!/bin/sh\necho hi\n";
  EXPECT_EQ(programKind(dir + "/train", false, false, false), ProgramKind::kPython);
  EXPECT_EQ(programKind(dir + "/run.sh", false, false, false), ProgramKind::kDirect);
  EXPECT_EQ(programKind("/bin/true", false, false, false), ProgramKind::kDirect);
  EXPECT_EQ(programKind("true", false, false, false), ProgramKind::kDirect);  // found on PATH
  EXPECT_EQ(programKind("x.py", false, false, false), ProgramKind::kPython);
  EXPECT_EQ(programKind("pkg.mod", true, false, false), ProgramKind::kPython);
  EXPECT_EQ(programKind(dir + "/train", false, false, /*noPython=*/true), ProgramKind::kDirect);
  EXPECT_EQ(programKind("no-such-program-xyz", false, false, false), ProgramKind::kDirect);
  fs::remove_all(dir);
}

TEST(PythonEntry, InterpreterOrderAndTheTorchCheck) {
  const std::string withTorch = test::pythonExe();  // read before the test changes DDPRUN_PYTHON
  ::setenv("PYTHON_EXEC", "/usr/bin/python3", 1);
  ::setenv("DDPRUN_PYTHON", "/nowhere/python", 1);
  EXPECT_EQ(choosePython().interpreter, "/usr/bin/python3");
  EXPECT_EQ(choosePython().source, "PYTHON_EXEC");
  ::unsetenv("PYTHON_EXEC");
  EXPECT_EQ(choosePython().interpreter, "/nowhere/python");
  EXPECT_THROW(torchProblem(choosePython()), ConfigError);
  ::unsetenv("DDPRUN_PYTHON");
  EXPECT_EQ(choosePython().source, "PATH");
  // A Python with torch (Debian's python3-torch, or the GPU machine's): found. One without: one line naming it
  // and the fix.
  EXPECT_EQ(torchProblem({withTorch, "PYTHON_EXEC"}), std::nullopt);
  const std::string dir = test::makeTempDir("notorch");
  std::ofstream(dir + "/python") << "#!/bin/sh\nexec '" << withTorch << "' -I -S \"$@\"\n";  // no site-packages
  fs::permissions(dir + "/python", fs::perms::owner_all);
  auto problem = torchProblem({dir + "/python", "PYTHON_EXEC"});
  ASSERT_TRUE(problem.has_value());
  EXPECT_NE(problem->find("cannot find the torch module"), std::string::npos) << *problem;
  EXPECT_NE(problem->find("PYTHON_EXEC"), std::string::npos) << *problem;
  fs::remove_all(dir);
}

TEST(LaunchArgs, StdStreamMasks) {
  EXPECT_EQ(maskFor(parseStdMask("3", "--tee"), 5), 3);
  auto perRank = parseStdMask("0:1,1:2", "--redirects");
  EXPECT_EQ(maskFor(perRank, 0), 1);
  EXPECT_EQ(maskFor(perRank, 1), 2);
  EXPECT_EQ(maskFor(perRank, 2), 0);
  EXPECT_THROW(parseStdMask("0:9", "--tee"), ConfigError);
}

TEST(GpuCount, HonoursCudaVisibleDevicesThenTheDriver) {
  const std::string dir = test::makeTempDir("gpus");
  for (const char* gpu : {"0000:01:00.0", "0000:02:00.0", "0000:03:00.0"}) fs::create_directories(dir + "/" + gpu);
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(countVisibleGpus(dir), 3);
  // No driver directory and no nvidia-smi (a missing program, not the machine's: this test may run on a GPU host).
  EXPECT_EQ(countVisibleGpus(dir + "/absent", dir + "/no-nvidia-smi"), 0);
  ::setenv("CUDA_VISIBLE_DEVICES", "2,0", 1);
  EXPECT_EQ(countVisibleGpus(dir), 2);
  ::setenv("CUDA_VISIBLE_DEVICES", "", 1);
  EXPECT_EQ(countVisibleGpus(dir), 0);  // set but empty hides every GPU in CUDA
  ::setenv("CUDA_VISIBLE_DEVICES", "0,-1,2", 1);
  EXPECT_EQ(countVisibleGpus(dir), 1);  // CUDA stops at the first invalid entry
  ::setenv("CUDA_VISIBLE_DEVICES", "-1", 1);
  EXPECT_EQ(countVisibleGpus(dir), 0);
  // As CUDA and torch count (torch/cuda/__init__.py): a GPU named twice shows none; an ordinal past the machine's
  // GPUs ends the list; an entry counts by its leading number; each with one warning, but the usual "-1" and "".
  ::setenv("CUDA_VISIBLE_DEVICES", "0,0", 1);
  GpuCount twice = detectGpus(dir);
  EXPECT_EQ(twice.count, 0);
  EXPECT_EQ(twice.warning, "CUDA_VISIBLE_DEVICES=0,0 names GPU 0 twice: CUDA then shows no GPU at all");
  ::setenv("CUDA_VISIBLE_DEVICES", "0,7", 1);
  GpuCount past = detectGpus(dir);
  EXPECT_EQ(past.count, 1);
  EXPECT_EQ(past.warning, "CUDA_VISIBLE_DEVICES=0,7: this machine has 3 GPU(s), so CUDA stops at 7 and shows 1");
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(countCudaVisibleDevices("1gpu2,2ampere", -1).count, 2);
  EXPECT_EQ(countCudaVisibleDevices("0,7", -1).count, 2) << "no driver to say how many there are";
  EXPECT_EQ(countCudaVisibleDevices("-1", 4).warning, "");
  EXPECT_EQ(countCudaVisibleDevices("", 4).warning, "");
  EXPECT_EQ(countCudaVisibleDevices("GPU-aa,GPU-bb", 2).count, 2);
  EXPECT_EQ(countCudaVisibleDevices("GPU-aa,GPU-aa", 2).count, 0);
  EXPECT_EQ(countCudaVisibleDevices("0,x", 2).warning,
            "CUDA_VISIBLE_DEVICES=0,x: CUDA stops at the entry 'x' and shows 1 GPU(s)");
  EXPECT_EQ(resolveNprocPerNode("gpu", 4, 2), 4);
  EXPECT_EQ(resolveNprocPerNode("auto", 0, 2), 2);
  EXPECT_EQ(resolveNprocPerNode("cpu", 4, 16), 16);
  EXPECT_EQ(resolveNprocPerNode("3", 0, 2), 3);
  EXPECT_THROW(resolveNprocPerNode("gpu", 0, 2), ConfigError);
  EXPECT_THROW(resolveNprocPerNode("0", 0, 2), ConfigError);
  EXPECT_THROW(resolveNprocPerNode("two", 0, 2), ConfigError);
  EXPECT_EQ(resolveNprocPerNode("4096", 0, 2), 4096);
  EXPECT_THROW(resolveNprocPerNode("4097", 0, 2), ConfigError);
  fs::remove_all(dir);
}

TEST(LaunchPlan, OneBoundOnTheWorkerCountAndTheMachineDecidesAutoAndGpu) {
  // The option table and the resolution share kMaxNprocPerNode: 4096 passes both, 4097 neither.
  EXPECT_EQ(parse({"--nproc-per-node", "4097", "prog"}).exitCode, 2);
  EXPECT_EQ(parse({"--local-ranks-filter", "4096", "prog"}).exitCode, 2);
  auto args = parse({"--nproc-per-node", "4096", "prog"});
  ASSERT_TRUE(args.config.has_value());
  EXPECT_EQ(resolveLaunchPlan(*args.config, MachineFacts{{0, "none"}, 2}).nproc, 4096);
  args = parse({"--nproc-per-node", "auto", "prog"});
  ASSERT_TRUE(args.config.has_value());
  EXPECT_EQ(resolveLaunchPlan(*args.config, MachineFacts{{2, "fake"}, 16}).nproc, 2);
  EXPECT_EQ(resolveLaunchPlan(*args.config, MachineFacts{{0, "none"}, 16}).nproc, 16);
  args = parse({"--nproc-per-node", "gpu", "prog"});
  ASSERT_TRUE(args.config.has_value());
  EXPECT_THROW(resolveLaunchPlan(*args.config, MachineFacts{{0, "none"}, 16}), ConfigError);
  // --virtual-local-rank with fewer GPUs listed than workers: refused, as torch 2.x refuses it.
  args = parse({"--nproc-per-node", "2", "--virtual-local-rank", "prog"});
  ASSERT_TRUE(args.config.has_value());
  ::setenv("CUDA_VISIBLE_DEVICES", "3", 1);
  try {
    resolveLaunchPlan(*args.config, MachineFacts{{0, "none"}, 16});
    ADD_FAILURE() << "two workers on one listed GPU";
  } catch (const ConfigError& e) {
    EXPECT_NE(
        std::string(e.what()).find("--virtual-local-rank: local rank 1 exceeds the GPUs in CUDA_VISIBLE_DEVICES=3"),
        std::string::npos)
        << e.what();
  }
  ::setenv("CUDA_VISIBLE_DEVICES", "3,5", 1);
  EXPECT_EQ(resolveLaunchPlan(*args.config, MachineFacts{{0, "none"}, 16}).nproc, 2);
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(resolveLaunchPlan(*args.config, MachineFacts{{0, "none"}, 16}).nproc, 2) << "rank r uses GPU r";
  args = parse({"--nproc-per-node", "gpu", "prog"});
  ASSERT_TRUE(args.config.has_value());
  // The plan keeps every argument as it was given.
  const LaunchPlan plan = resolveLaunchPlan(*args.config, MachineFacts{{3, "fake"}, 16});
  EXPECT_EQ(plan.nprocPerNode, "gpu");
  EXPECT_EQ(plan.program, "prog");
  EXPECT_TRUE(plan.pythonInterpreter.empty()) << "no Python chosen when the machine's facts are given";
}

TEST(GpuCount, FallsBackToNvidiaSmiWhenTheDriverDirIsAbsent) {
  const std::string dir = test::makeTempDir("nvsmi");
  const std::string fake = dir + "/nvidia-smi";
  {
    std::ofstream script(fake);
    script << "#!/bin/sh\n[ \"$1\" = -L ] || exit 9\n"
           << "echo 'GPU 0: NVIDIA H200 (UUID: GPU-11111111-2222-3333-4444-555555555555)'\n"
           << "echo '  MIG 3g.71gb     Device  0: (UUID: MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee)'\n"
           << "echo 'GPU 1: NVIDIA H200 (UUID: GPU-66666666-7777-8888-9999-000000000000)'\n";
  }
  fs::permissions(fake, fs::perms::owner_all);
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  GpuCount found = detectGpus(dir + "/no-proc-dir", fake);
  EXPECT_EQ(found.count, 2);
  EXPECT_EQ(found.source, fake + " -L");
  found = detectGpus(dir + "/no-proc-dir", dir + "/absent-nvidia-smi");
  EXPECT_EQ(found.count, 0);
  EXPECT_NE(found.source.find("none found"), std::string::npos) << found.source;
  ::setenv("CUDA_VISIBLE_DEVICES", "0", 1);
  EXPECT_EQ(detectGpus(dir + "/no-proc-dir", fake).count, 1);  // the variable wins over the driver
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(countGpusInNvidiaSmiList("No devices were found\n"), 0);
  fs::remove_all(dir);
}

TEST(WorkerEnv, GivesTorchrunsFullEnvironment) {
  WorkerSpec spec;
  spec.maxRestarts = 3;
  spec.runId = "job7";
  spec.role = "trainer";
  WorkerAssignment worker{1, 5, 5, 1, 2, 8, 4, 8};
  AttemptInfo attempt{2, "10.0.0.1", 29400, true, "/logs/attempt_2/1/error.json", "/logs/attempt_2/1/progress", {}};
  auto env = workerEnvironment(spec, worker, attempt);
  const std::map<std::string, std::string> expected{
      {"LOCAL_RANK", "1"},
      {"RANK", "5"},
      {"GROUP_RANK", "1"},
      {"ROLE_RANK", "5"},
      {"ROLE_NAME", "trainer"},
      {"LOCAL_WORLD_SIZE", "4"},
      {"WORLD_SIZE", "8"},
      {"GROUP_WORLD_SIZE", "2"},
      {"ROLE_WORLD_SIZE", "8"},
      {"MASTER_ADDR", "10.0.0.1"},
      {"MASTER_PORT", "29400"},
      {"TORCHELASTIC_RESTART_COUNT", "2"},
      {"TORCHELASTIC_MAX_RESTARTS", "3"},
      {"TORCHELASTIC_RUN_ID", "job7"},
      {"TORCHELASTIC_USE_AGENT_STORE", "True"},
      {"TORCHELASTIC_ERROR_FILE", "/logs/attempt_2/1/error.json"},
      {"OMP_NUM_THREADS", "1"},
      {"DDPRUN_PROGRESS_FILE", "/logs/attempt_2/1/progress"},
      // torch 1.13 reads the first (1: tear down on an NCCL error); torch 2.x the second (3: tear down after the
      // flight recorder has dumped).
      {"NCCL_ASYNC_ERROR_HANDLING", "1"},
      {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"}};
  for (const auto& [key, value] : expected) EXPECT_EQ(env[key], value) << key;
  EXPECT_EQ(env.count("TORCH_NCCL_DEBUG_INFO_PIPE_FILE"), 0u) << "no flight recorder files given";
  attempt.flightRecorder = flightRecorderFiles("/logs/attempt_2/1", 5, [](const char*) { return std::nullopt; });
  env = workerEnvironment(spec, worker, attempt);
  EXPECT_EQ(env["TORCH_FR_DUMP_TEMP_FILE"], "/logs/attempt_2/1/nccl_trace_rank_");
  EXPECT_EQ(env["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"], "/logs/attempt_2/1/nccl_dump_rank_");
  spec.inheritedOmpThreads = true;
  EXPECT_EQ(workerEnvironment(spec, worker, attempt).count("OMP_NUM_THREADS"), 0u);
  attempt.useAgentStore = false;
  EXPECT_EQ(workerEnvironment(spec, worker, attempt)["TORCHELASTIC_USE_AGENT_STORE"], "False");
}

TEST(WorkerEnv, RunsPythonEntryPointsUnbufferedAndBinariesDirectly) {
  LaunchPlan config;
  config.pythonInterpreter = "/usr/bin/python3";
  config.program = "train.py";
  config.programArgs = {"--lr", "0.1"};
  EXPECT_EQ(workerCommand(config), (std::vector<std::string>{"/usr/bin/python3", "-u", "train.py", "--lr", "0.1"}));
  config.module = true;
  config.program = "pkg.train";
  EXPECT_EQ(workerCommand(config),
            (std::vector<std::string>{"/usr/bin/python3", "-u", "-m", "pkg.train", "--lr", "0.1"}));
  config.module = false;
  config.pythonInterpreter.clear();
  config.program = "build/bin/worker";
  EXPECT_EQ(workerCommand(config), (std::vector<std::string>{"build/bin/worker", "--lr", "0.1"}));
}

TEST(FailureSummary, NamesTheEarliestFailureAsRootCause) {
  const std::string dir = test::makeTempDir("summary");
  writeErrorFile(dir + "/1.json", {"InjectedFault: boom", "", 1700000000});
  writeErrorFile(dir + "/0.json", {"RuntimeError: Connection closed by peer", "", 1700000000});
  // Rank 1's file was written first (the order comes from the files' modification times).
  fs::last_write_time(dir + "/0.json", fs::last_write_time(dir + "/1.json") + std::chrono::milliseconds(20));
  WorkerExit exited{1, 0, std::chrono::system_clock::now()};
  WorkerExit killed{0, 9, std::chrono::system_clock::now()};
  std::vector<WorkerFailure> failures{describeFailure(0, 0, 100, exited, dir + "/0.json"),
                                      describeFailure(1, 1, 101, exited, dir + "/1.json"),
                                      describeFailure(2, 2, 102, killed, dir + "/absent.json")};
  EXPECT_EQ(rootCauseIndex({failures[0], failures[1]}), 1u);
  EXPECT_EQ(failures[2].message, "Signal 9 (SIGKILL) received by PID 102");
  std::string text = formatFailureSummary("worker", "default", {failures[0], failures[1]}, "host1");
  const auto root = text.find("Root Cause");
  ASSERT_NE(root, std::string::npos) << text;
  EXPECT_NE(text.find("rank      : 1 (local_rank: 1)", root), std::string::npos) << text;
  EXPECT_NE(text.find("message   : InjectedFault: boom", root), std::string::npos) << text;
  EXPECT_NE(text.find("exitcode  : 1 (pid: 101)", root), std::string::npos) << text;
  EXPECT_LT(text.find("Connection closed by peer"), root) << text;
  EXPECT_NE(formatFailureSummary("w", "default", {failures[2]}, "h").find("exitcode  : -9 (pid: 102) SIGKILL"),
            std::string::npos);
  fs::remove_all(dir);
}

TEST(FailureSummary, AHungRankThatWaitsOnItsPeersIsNeverTheRootCauseOverOneThatDoesNot) {
  // In lockstep DDP both ranks of a hang stop at the same step and are flagged on the same tick; rank 0 (the
  // earlier entry) waits in the allreduce, rank 1 is stuck in its own code.
  const auto now = std::chrono::system_clock::now();
  WorkerFailure waiting;
  waiting.globalRank = 0;
  waiting.order = now;
  waiting.waitsOnPeers = true;
  WorkerFailure stuck;
  stuck.globalRank = 1;
  stuck.order = now + std::chrono::milliseconds(1);
  EXPECT_EQ(rootCauseIndex({waiting, stuck}), 1u);
  EXPECT_EQ(rootCauseIndex({stuck, waiting}), 0u);
  stuck.waitsOnPeers = true;  // every rank waits: time decides again
  EXPECT_EQ(rootCauseIndex({waiting, stuck}), 0u);
}

}  // namespace
}  // namespace ddprun::launcher

namespace ddprun::launcher {
namespace {

/// A fake /sys: `nodes` NUMA nodes of `perNode` CPUs each, `sockets` sockets, L3 caches of `perL3` CPUs, and NVIDIA
/// GPUs on the given nodes (in PCI order).
std::string fakeSys(int nodes, int perNode, int sockets, int perL3, const std::vector<int>& gpuNodes) {
  const std::string root = test::makeTempDir("sysfs");
  for (int node = 0; node < nodes; ++node) {
    const std::string dir = root + "/devices/system/node/node" + std::to_string(node);
    fs::create_directories(dir);
    std::ofstream(dir + "/cpulist") << node * perNode << "-" << (node + 1) * perNode - 1 << "\n";
  }
  const int cpus = nodes * perNode;
  for (int cpu = 0; cpu < cpus; ++cpu) {
    const std::string dir = root + "/devices/system/cpu/cpu" + std::to_string(cpu);
    fs::create_directories(dir + "/topology");
    fs::create_directories(dir + "/cache/index3");
    std::ofstream(dir + "/topology/physical_package_id") << cpu / (cpus / sockets) << "\n";
    const int l3 = cpu / perL3;
    std::ofstream(dir + "/cache/index3/shared_cpu_list") << l3 * perL3 << "-" << (l3 + 1) * perL3 - 1 << "\n";
  }
  for (size_t gpu = 0; gpu < gpuNodes.size(); ++gpu) {
    const std::string dir = root + "/bus/pci/devices/0000:" + std::to_string(10 + gpu) + ":00.0";
    fs::create_directories(dir);
    std::ofstream(dir + "/vendor") << "0x10de\n";
    std::ofstream(dir + "/class") << "0x030200\n";
    std::ofstream(dir + "/numa_node") << gpuNodes[gpu] << "\n";
  }
  const std::string nic = root + "/bus/pci/devices/0000:05:00.0";  // not a GPU
  fs::create_directories(nic);
  std::ofstream(nic + "/vendor") << "0x15b3\n";
  std::ofstream(nic + "/class") << "0x020700\n";
  return root;
}

TEST(NumaBinding, EachRankGetsTheCpusAndMemoryOfItsGpusNode) {
  // 4 nodes of 8 CPUs on 2 sockets, L3 caches of 4 CPUs; GPUs 0-3 on nodes 1, 0, 3, 2.
  const std::string sys = fakeSys(4, 8, 2, 4, {1, 0, 3, 2});
  const NumaTopology topology = readNumaTopology(sys);
  ASSERT_EQ(topology.nodes.size(), 4u);
  EXPECT_EQ(topology.gpuNodes, (std::vector<int>{1, 0, 3, 2})) << "the network card is not a GPU";
  EXPECT_EQ(topology.nodes[2].socket, 1);
  ASSERT_EQ(topology.nodes[0].l3Groups.size(), 2u);
  const auto node = planNumaBinding("node", topology, 4);
  ASSERT_EQ(node.size(), 4u);
  EXPECT_EQ(formatCpuList(node[0].cpus), "8-15");
  EXPECT_EQ(node[0].memoryNode, 1);
  EXPECT_EQ(formatCpuList(node[2].cpus), "24-31");
  const auto socket = planNumaBinding("socket", topology, 4);
  EXPECT_EQ(formatCpuList(socket[0].cpus), "0-15") << "node 1 is on socket 0 with node 0";
  EXPECT_EQ(formatCpuList(socket[3].cpus), "16-31");
  // Eight ranks on four GPUs: two per GPU; exclusive halves each node, core-complex gives each an L3 domain.
  const auto exclusive = planNumaBinding("exclusive", topology, 8);
  EXPECT_EQ(formatCpuList(exclusive[0].cpus), "8-11");
  EXPECT_EQ(formatCpuList(exclusive[4].cpus), "12-15") << "rank 4 uses GPU 0 again";
  const auto complexes = planNumaBinding("core-complex", topology, 8);
  EXPECT_EQ(formatCpuList(complexes[1].cpus), "0-3");
  EXPECT_EQ(formatCpuList(complexes[5].cpus), "4-7");
  fs::remove_all(sys);
}

TEST(NumaBinding, OnlyTheCpusDdprunMayRunOnAreUsedAsTorchDoes) {
  // `taskset -c 9-12 ddprun …` on 4 nodes of 8 CPUs: every node's CPUs are cut to that set (torch 2.x intersects with
  // os.sched_getaffinity(0)); a rank whose node keeps none is an error naming it.
  const std::string sys = fakeSys(4, 8, 2, 4, {1, 0, 3, 2});
  const NumaTopology topology = restrictToCpus(readNumaTopology(sys), {9, 10, 11, 12});
  const auto node = planNumaBinding("node", topology, 1);
  EXPECT_EQ(formatCpuList(node[0].cpus), "9-12");
  const auto complexes = planNumaBinding("core-complex", topology, 1);
  EXPECT_EQ(formatCpuList(complexes[0].cpus), "9-11") << "the first L3 domain of node 1 that is left";
  try {
    planNumaBinding("node", topology, 2);  // local rank 1 uses GPU 1, on node 0: none of 9-12
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("local rank 1's NUMA node 0 has none of the CPUs ddprun may run on"),
              std::string::npos)
        << e.what();
  }
  fs::remove_all(sys);
}

TEST(NumaBinding, WithoutGpusRanksAreSpreadOverTheNodesInBlocks) {
  const std::string sys = fakeSys(2, 4, 2, 4, {});
  const auto plan = planNumaBinding("node", readNumaTopology(sys), 4);
  ASSERT_EQ(plan.size(), 4u);
  EXPECT_EQ(plan[0].memoryNode, 0);
  EXPECT_EQ(plan[1].memoryNode, 0);
  EXPECT_EQ(plan[2].memoryNode, 1);
  EXPECT_EQ(formatCpuList(plan[3].cpus), "4-7");
  // A machine with no NUMA information at all is one node of every CPU.
  const std::string empty = test::makeTempDir("nosys");
  const auto flat = readNumaTopology(empty);
  ASSERT_EQ(flat.nodes.size(), 1u);
  EXPECT_EQ(flat.nodes[0].cpus.size(), static_cast<size_t>(::sysconf(_SC_NPROCESSORS_ONLN)));
  EXPECT_EQ(parseCpuList("0-2,5"), (std::vector<int>{0, 1, 2, 5}));
  EXPECT_TRUE(parseCpuList("x").empty());
  fs::remove_all(sys);
  fs::remove_all(empty);
}

}  // namespace
}  // namespace ddprun::launcher
