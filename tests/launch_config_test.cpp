// The command line and the config file: torchrun's flags, their spellings and prefixes, PET_ and Slurm variables,
// every bad value one line naming the option.
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "common/error.hpp"
#include "launcher/config/launch_config.hpp"
#include "launcher/config/launch_plan.hpp"
#include "launcher/log_layout.hpp"
#include "support/child_process.hpp"
#include "support/launch_args.hpp"

namespace ddprun::launcher {
namespace fs = std::filesystem;
namespace {

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
  // A file that never ends is read up to a bound, not until memory runs out (2 GB in 10 s before).
  testing::internal::CaptureStderr();
  EXPECT_EQ(parse({"--config", "/dev/zero", "prog"}).exitCode, 2);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("--config /dev/zero: longer than 1 MiB"), std::string::npos) << err;
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
  // A prefix that is one torchrun flag is that flag, though it also begins one of ddprun's own (issue 58).
  auto max = parse({"--max", "1", "prog"});
  ASSERT_TRUE(max.config);
  EXPECT_EQ(max.config->maxRestarts, 1);
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
  // One node without --standalone and without --rdzv-id too: "none" named no run on the page or in the report.
  auto single = parse({"--nproc-per-node", "2", "prog"});
  ASSERT_TRUE(single.config);
  EXPECT_EQ(single.config->rdzvId.size(), 36u);
  EXPECT_EQ(parse({"--rdzv-id", "none", "prog"}).config->rdzvId, "none");  // asked for: kept
}

TEST(LaunchArgs, StdStreamMasks) {
  EXPECT_EQ(maskFor(parseStdMask("3", "--tee"), 5), 3);
  auto perRank = parseStdMask("0:1,1:2", "--redirects");
  EXPECT_EQ(maskFor(perRank, 0), 1);
  EXPECT_EQ(maskFor(perRank, 1), 2);
  EXPECT_EQ(maskFor(perRank, 2), 0);
  EXPECT_THROW(parseStdMask("0:9", "--tee"), ConfigError);
}

}  // namespace
}  // namespace ddprun::launcher
