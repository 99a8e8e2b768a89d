#include "launcher/launch_config.hpp"

#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/env.hpp"
#include "common/error.hpp"
#include "launcher/scheduler_env.hpp"
#include <spdlog/spdlog.h>

namespace ddprun::launcher {
namespace {

std::pair<int, int> parseNnodes(const std::string& text) {
  auto colon = text.find(':');
  if (colon == std::string::npos) {
    int n = static_cast<int>(parseInt(text, "--nnodes"));
    return {n, n};
  }
  return {static_cast<int>(parseInt(text.substr(0, colon), "--nnodes (MIN)")),
          static_cast<int>(parseInt(text.substr(colon + 1), "--nnodes (MAX)"))};
}

std::map<std::string, std::string> parseRdzvConf(const std::string& text) {
  std::map<std::string, std::string> conf;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    if (item.empty()) continue;
    auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0) throw ConfigError("--rdzv-conf: expected key=value, got '" + item + "'");
    conf[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return conf;
}

std::vector<int> parseRankList(const std::string& text) {
  std::vector<int> ranks;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    if (!item.empty()) ranks.push_back(static_cast<int>(parseInt(item, "--local-ranks-filter")));
  }
  return ranks;
}

/// String form of every option, so JSON and flags go through one parser.
struct RawOptions {
  std::string nnodes = "1:1", nprocPerNode = "1", rdzvConf, redirects = "0", tee = "0", localRanksFilter;
  std::set<std::string> given;  ///< options set by --config, a flag or a PET_ variable (canonical '_' names)
};

std::string jsonToText(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_boolean()) return value.get<bool>() ? "true" : "false";
  return value.dump();
}

void applyConfigJson(const nlohmann::json& json, const std::string& path, LaunchConfig& c, RawOptions& raw);

/// Applies a configs/-style JSON file; option names as on the command line, '-' or '_' alike.
void applyConfigFile(const std::string& path, LaunchConfig& c, RawOptions& raw) {
  std::ifstream in(path);
  if (!in) throw ConfigError("--config: cannot read " + path);
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw ConfigError("--config " + path + ": not valid JSON: " + e.what());
  }
  try {
    applyConfigJson(json, path, c, raw);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError("--config " + path + ": " + e.what());
  }
}

void applyConfigJson(const nlohmann::json& json, const std::string& path, LaunchConfig& c, RawOptions& raw) {
  if (!json.is_object()) throw ConfigError("--config " + path + ": expected a JSON object");
  std::set<std::string> seen;
  for (const auto& [rawKey, value] : json.items()) {
    std::string key = rawKey;
    for (char& ch : key) ch = ch == '-' ? '_' : ch;
    if (!seen.insert(key).second) throw ConfigError("--config " + path + ": option '" + rawKey + "' given twice");
    raw.given.insert(key);
    const std::string text = jsonToText(value);
    const std::string what = "--config " + path + ": " + rawKey;
    auto asInt = [&] { return static_cast<int>(parseInt(text, what)); };
    auto asBool = [&] {
      if (text == "true" || text == "1") return true;
      if (text == "false" || text == "0") return false;
      throw ConfigError(what + ": expected true or false, got " + text);
    };
    if (key == "nnodes") raw.nnodes = text;
    else if (key == "nproc_per_node") raw.nprocPerNode = text;
    else if (key == "node_rank") c.nodeRank = asInt();
    else if (key == "standalone") c.standalone = asBool();
    else if (key == "rdzv_backend") c.rdzvBackend = text;
    else if (key == "rdzv_endpoint") c.rdzvEndpoint = text;
    else if (key == "rdzv_id") c.rdzvId = text;
    else if (key == "rdzv_conf") raw.rdzvConf = text;
    else if (key == "max_restarts") c.maxRestarts = asInt();
    else if (key == "monitor_interval") c.monitorInterval = std::stod(text);
    else if (key == "stop_timeout") c.stopTimeout = std::stod(text);
    else if (key == "master_addr") c.masterAddr = text;
    else if (key == "master_port") c.masterPort = asInt();
    else if (key == "local_addr") c.localAddr = text;
    else if (key == "role") c.role = text;
    else if (key == "log_dir") c.logDir = text;
    else if (key == "redirects") raw.redirects = text;
    else if (key == "tee") raw.tee = text;
    else if (key == "local_ranks_filter") raw.localRanksFilter = text;
    else if (key == "no_python") c.noPython = asBool();
    else if (key == "no_agent_store") c.useAgentStore = !asBool();
    else if (key == "module") c.module = asBool();
    else if (key == "run_path") c.runPath = asBool();
    else if (key == "program" || key == "training_script") c.program = text;
    else if (key == "args" || key == "training_script_args") c.programArgs = value.get<std::vector<std::string>>();
    else throw ConfigError("--config " + path + ": unknown option '" + rawKey + "'");
  }
}

/// --config must be read before the flags so that flags override it; find it by hand.
std::optional<std::string> findConfigPath(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--config" && i + 1 < argc) return std::string(argv[i + 1]);
    if (arg.rfind("--config=", 0) == 0) return arg.substr(9);
    if (!arg.empty() && arg[0] != '-') {
      // The value of the previous flag, or the program: everything after the program is its own.
      if (i > 1 && std::string(argv[i - 1]).rfind("--", 0) == 0) continue;
      break;
    }
  }
  return std::nullopt;
}

/// "nproc_per_node" for --nproc-per-node,--nproc_per_node.
std::string canonicalName(const CLI::Option& option) {
  std::string name = option.get_lnames().front();
  for (char& ch : name) ch = ch == '-' ? '_' : ch;
  return name;
}

/// torchrun reads PET_<FLAG> for every flag not on the command line (torch/distributed/argparse_util.py);
/// Kubeflow's PyTorchJob sets them, so the same container command works there unchanged.
void useTorchrunEnvFallback(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    if (option->get_lnames().empty() || option->get_lnames().front() == "help" ||
        option->get_lnames().front() == "config") {
      continue;
    }
    std::string env = "PET_" + canonicalName(*option);
    for (char& ch : env) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    option->envname(env);
    // argparse (torchrun) takes the last of a repeated option; so do we.
    option->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }
}

/// Slurm's variables fill the flags a node's command line leaves out (docs/schedulers.md).
void applySchedulerDefaults(LaunchConfig& c, RawOptions& raw) {
  if (c.standalone) return;  // one node on purpose, even inside a Slurm allocation
  const SchedulerDefaults slurm = slurmDefaults([](const std::string& name) { return getEnv(name); });
  if (slurm.source.empty()) return;
  std::vector<std::string> applied;
  if (slurm.nnodes && !raw.given.count("nnodes")) {
    raw.nnodes = *slurm.nnodes;
    applied.push_back("--nnodes " + *slurm.nnodes);
  }
  if (slurm.nodeRank && !raw.given.count("node_rank")) {
    c.nodeRank = *slurm.nodeRank;
    applied.push_back("--node-rank " + std::to_string(*slurm.nodeRank));
  }
  if (slurm.rdzvEndpointHost) {
    if (c.rdzvBackend == "static" && !raw.given.count("master_addr")) {
      c.masterAddr = *slurm.rdzvEndpointHost;
      applied.push_back("--master-addr " + c.masterAddr);
    } else if (c.rdzvBackend != "static" && !raw.given.count("rdzv_endpoint")) {
      c.rdzvEndpoint = *slurm.rdzvEndpointHost;
      applied.push_back("--rdzv-endpoint " + c.rdzvEndpoint);
    }
  }
  if (slurm.rdzvId && !raw.given.count("rdzv_id")) {
    c.rdzvId = *slurm.rdzvId;
    applied.push_back("--rdzv-id " + c.rdzvId);
  }
  if (!applied.empty()) {
    std::string list;
    for (const auto& item : applied) list += (list.empty() ? "" : ", ") + item;
    std::cerr << "ddprun: from " << slurm.source << "'s environment: " << list << "\n";
  }
}

/// Picks single-node, static or dynamic rendezvous and checks the flags each needs.
void chooseRendezvousMode(LaunchConfig& c, const RawOptions& raw) {
  if (c.standalone) {
    c.mode = RendezvousMode::kSingleNode;
    return;
  }
  if (c.rdzvBackend == "static") {
    if (c.minNodes != c.maxNodes) {
      throw ConfigError("--nnodes " + raw.nnodes + ": static rendezvous needs a fixed node count; use "
                        "--rdzv-backend c10d (or etcd-v3) for MIN:MAX");
    }
    if (c.nodeRank >= c.minNodes) {
      throw ConfigError("--node-rank " + std::to_string(c.nodeRank) + ": must be below --nnodes " + raw.nnodes);
    }
    c.mode = c.minNodes > 1 ? RendezvousMode::kStatic : RendezvousMode::kSingleNode;
    if (!c.rdzvEndpoint.empty()) {
      // torchrun's static rendezvous takes the endpoint, when given, over --master-addr/--master-port.
      std::tie(c.masterAddr, c.masterPort) = parseEndpoint(c.rdzvEndpoint, c.masterPort, "--rdzv-endpoint");
    }
    c.rdzvHost = c.masterAddr;
    c.rdzvPort = c.masterPort;
    if (c.mode == RendezvousMode::kStatic) {
      if (c.masterPort == 0) throw ConfigError("--master-port 0: the nodes of a static job need a known port");
      if (!c.useAgentStore) {
        throw ConfigError("--no-agent-store: static nodes share node 0's store (its agent serves it); use "
                          "--rdzv-backend c10d for rank 0's worker to host the workers' store");
      }
    }
    return;
  }
  if (c.rdzvEndpoint.empty()) {
    if (c.rdzvBackend == "etcd-v3") throw ConfigError("--rdzv-backend etcd-v3 needs --rdzv-endpoint host:port");
    if (c.maxNodes > 1) {
      throw ConfigError("--nnodes " + raw.nnodes + " with --rdzv-backend c10d needs --rdzv-endpoint host[:port]");
    }
    c.mode = RendezvousMode::kSingleNode;  // torchrun's --rdzv-backend c10d on one node without an endpoint
    return;
  }
  std::tie(c.rdzvHost, c.rdzvPort) =
      parseEndpoint(c.rdzvEndpoint, c.rdzvBackend == "etcd-v3" ? 2379 : 29400, "--rdzv-endpoint");
  c.mode = RendezvousMode::kDynamic;
}

void validate(LaunchConfig& c, RawOptions& raw) {
  applySchedulerDefaults(c, raw);
  std::tie(c.minNodes, c.maxNodes) = parseNnodes(raw.nnodes);
  if (c.minNodes < 1 || c.maxNodes < c.minNodes) {
    throw ConfigError("--nnodes: expected N or MIN:MAX with 1 <= MIN <= MAX, got '" + raw.nnodes + "'");
  }
  c.nprocPerNode = raw.nprocPerNode;
  c.rdzvConf = parseRdzvConf(raw.rdzvConf);
  c.redirects = parseStdMask(raw.redirects, "--redirects");
  c.tee = parseStdMask(raw.tee, "--tee");
  c.localRanksFilter = parseRankList(raw.localRanksFilter);
  if (c.maxRestarts < 0) throw ConfigError("--max-restarts must not be negative");
  // Written as !(x > 0) so that NaN fails too.
  if (!(c.monitorInterval > 0) || c.monitorInterval > 3600) throw ConfigError("--monitor-interval: expected 0 < seconds <= 3600");
  if (!(c.stopTimeout >= 0) || c.stopTimeout > 86400) throw ConfigError("--stop-timeout: expected 0 <= seconds <= 86400");
  if (c.rdzvBackend == "etcd" || c.rdzvBackend == "etcd-v2") {
    throw ConfigError("--rdzv-backend " + c.rdzvBackend + ": etcd's v2 API is not supported; use etcd-v3 (etcd >= 3.4)");
  }
  if (c.rdzvBackend != "static" && c.rdzvBackend != "c10d" && c.rdzvBackend != "etcd-v3") {
    throw ConfigError("--rdzv-backend " + c.rdzvBackend + ": expected static, c10d or etcd-v3");
  }
  c.rdzv = parseRendezvousConf(c.rdzvConf);
  if (c.masterPort < 0 || c.masterPort > 65535) throw ConfigError("--master-port: not a TCP port");
  if (c.nodeRank < 0) throw ConfigError("--node-rank must not be negative");
  if (c.program.empty()) throw ConfigError("no program given: ddprun [options] program [args...]");
  // CLI11's prefix mode hands an unknown flag over as the program; it is a typo, not a program.
  if (c.program[0] == '-') throw ConfigError("unknown option '" + c.program + "' (see --help)");
  if (c.noPython && (c.module || c.runPath)) throw ConfigError("--no-python cannot be combined with -m/--run-path");
  if (c.standalone) {
    c.rdzvBackend = "c10d";
    if (c.minNodes != 1 || c.maxNodes != 1) throw ConfigError("--standalone runs one node: --nnodes must be 1");
  }
  chooseRendezvousMode(c, raw);
}

}  // namespace

RendezvousConf parseRendezvousConf(const std::map<std::string, std::string>& raw) {
  RendezvousConf conf;
  auto seconds = [](const std::string& key, const std::string& text, double maxSeconds) {
    double value = 0;
    try {
      size_t used = 0;
      value = std::stod(text, &used);
      if (used != text.size()) throw std::invalid_argument(text);
    } catch (const std::exception&) {
      throw ConfigError("--rdzv-conf " + key + "=" + text + ": expected a number of seconds");
    }
    // Below 10 ms the millisecond timers would round to zero and spin.
    if (!(value >= 0.01) || value > maxSeconds) {
      throw ConfigError("--rdzv-conf " + key + "=" + text + ": expected 0.01 <= seconds <= " +
                        std::to_string(static_cast<long>(maxSeconds)));
    }
    return value;
  };
  for (const auto& [key, text] : raw) {
    if (key == "join_timeout") conf.joinTimeout = seconds(key, text, 86400 * 7);
    else if (key == "last_call_timeout") conf.lastCallTimeout = seconds(key, text, 86400);
    else if (key == "close_timeout") conf.closeTimeout = seconds(key, text, 86400);
    else if (key == "keep_alive_interval") conf.keepAliveInterval = seconds(key, text, 3600);
    else if (key == "read_timeout" || key == "timeout") conf.readTimeout = seconds(key, text, 86400);
    else if (key == "keep_alive_max_attempt") {
      const int64_t n = parseInt(text, "--rdzv-conf keep_alive_max_attempt");
      if (n < 1 || n > 1000) throw ConfigError("--rdzv-conf keep_alive_max_attempt=" + text + ": expected 1..1000");
      conf.keepAliveMaxAttempt = static_cast<int>(n);
    } else if (key == "is_host") {
      if (text == "1" || text == "true" || text == "True") conf.isHost = true;
      else if (text == "0" || text == "false" || text == "False") conf.isHost = false;
      else throw ConfigError("--rdzv-conf is_host=" + text + ": expected 1/true or 0/false");
    } else if (key == "heartbeat_timeout" || key == "store_type" || key == "use_libuv" || key == "rank") {
      // torchrun-specific tuning with no meaning for ddprun's store; accepted so torchrun commands work.
    } else {
      throw ConfigError("--rdzv-conf: unknown key '" + key +
                        "' (known: join_timeout, last_call_timeout, close_timeout, keep_alive_interval, "
                        "keep_alive_max_attempt, read_timeout, is_host)");
    }
  }
  return conf;
}

std::pair<std::string, int> parseEndpoint(const std::string& text, int defaultPort, const std::string& flag) {
  std::string host = text;
  int port = defaultPort;
  const auto colon = text.rfind(':');
  if (text.size() > 1 && text.front() == '[') {  // [v6 address]:port
    const auto close = text.find(']');
    if (close == std::string::npos) throw ConfigError(flag + " " + text + ": unbalanced '['");
    host = text.substr(1, close - 1);
    if (close + 1 < text.size()) {
      if (text[close + 1] != ':') throw ConfigError(flag + " " + text + ": expected [host]:port");
      port = static_cast<int>(parseInt(text.substr(close + 2), flag + " (port)"));
    }
  } else if (colon != std::string::npos) {
    host = text.substr(0, colon);
    port = static_cast<int>(parseInt(text.substr(colon + 1), flag + " (port)"));
  }
  if (host.empty()) throw ConfigError(flag + " " + text + ": no host");
  if (port < 1 || port > 65535) throw ConfigError(flag + " " + text + ": port must be 1..65535");
  return {host, port};
}

std::map<int, int> parseStdMask(const std::string& text, const std::string& flag) {
  std::map<int, int> masks;
  auto checkMask = [&](int64_t m) {
    if (m < 0 || m > 3) throw ConfigError(flag + ": expected 0..3 (1 stdout, 2 stderr, 3 both), got '" + text + "'");
    return static_cast<int>(m);
  };
  if (text.find(':') == std::string::npos) {
    masks[-1] = checkMask(parseInt(text, flag));
    return masks;
  }
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    auto colon = item.find(':');
    if (colon == std::string::npos) throw ConfigError(flag + ": expected rank:mask pairs, got '" + text + "'");
    masks[static_cast<int>(parseInt(item.substr(0, colon), flag))] = checkMask(parseInt(item.substr(colon + 1), flag));
  }
  return masks;
}

int maskFor(const std::map<int, int>& masks, int localRank) {
  auto it = masks.find(localRank);
  if (it != masks.end()) return it->second;
  it = masks.find(-1);
  return it != masks.end() ? it->second : 0;
}

ParseOutcome parseLaunchArgs(int argc, char** argv) {
  ParseOutcome outcome;
  LaunchConfig c;
  RawOptions raw;
  CLI::App app{"ddprun: launch and supervise a DDP worker group, torchrun-compatible\n"
               "usage: ddprun [options] program [args...]"};
  app.prefix_command();  // everything from the program on belongs to the program
  std::string configPath;
  app.add_option("--config", configPath, "JSON file with these options (flags override it)");
  app.add_option("--nnodes", raw.nnodes, "N or MIN:MAX nodes");
  app.add_option("--nproc-per-node,--nproc_per_node", raw.nprocPerNode, "workers per node: N, auto, cpu or gpu");
  app.add_option("--node-rank,--node_rank", c.nodeRank, "this node's rank (static rendezvous)");
  app.add_flag("--standalone", c.standalone, "single node, local store on a free port");
  app.add_option("--rdzv-backend,--rdzv_backend", c.rdzvBackend, "static, c10d or etcd-v3");
  app.add_option("--rdzv-endpoint,--rdzv_endpoint", c.rdzvEndpoint,
                 "host[:port] of the rendezvous store (c10d, port 29400) or of etcd (etcd-v3, port 2379)");
  app.add_option("--rdzv-id,--rdzv_id", c.rdzvId, "job id shared by all nodes");
  app.add_option("--rdzv-conf,--rdzv_conf", raw.rdzvConf,
                 "k1=v1,...: join_timeout, last_call_timeout, close_timeout, keep_alive_interval, "
                 "keep_alive_max_attempt, read_timeout, is_host");
  app.add_option("--max-restarts,--max_restarts", c.maxRestarts, "worker group restarts before failing");
  app.add_option("--monitor-interval,--monitor_interval", c.monitorInterval, "seconds between health checks");
  app.add_option("--stop-timeout,--stop_timeout", c.stopTimeout, "seconds from SIGTERM to SIGKILL when stopping workers");
  app.add_option("--master-addr,--master_addr", c.masterAddr, "store address given to workers");
  app.add_option("--master-port,--master_port", c.masterPort, "store port");
  app.add_option("--local-addr,--local_addr", c.localAddr, "address this node advertises");
  app.add_option("--role", c.role, "worker role name (ROLE_NAME)");
  app.add_option("--log-dir,--log_dir", c.logDir, "per-attempt worker logs and error files");
  app.add_option("-r,--redirects", raw.redirects, "send worker std streams to files only: 0..3 or rank:mask,...");
  app.add_option("-t,--tee", raw.tee, "send worker std streams to files and console: 0..3 or rank:mask,...");
  app.add_option("--local-ranks-filter,--local_ranks_filter", raw.localRanksFilter, "local ranks shown on console");
  app.add_flag("--no-python,--no_python", c.noPython, "run the program directly, never through Python");
  bool noAgentStore = false;
  app.add_flag("--no-agent-store,--no_agent_store", noAgentStore,
               "TORCHELASTIC_USE_AGENT_STORE=False: rank 0's worker hosts the store at MASTER_PORT");
  app.add_flag("-m,--module", c.module, "run the program as a Python module (python -m)");
  app.add_flag("--run-path,--run_path", c.runPath, "run the program as a Python file");
  useTorchrunEnvFallback(app);
  try {
    if (auto path = findConfigPath(argc, argv)) applyConfigFile(*path, c, raw);
    app.parse(argc, argv);
    if (noAgentStore) c.useAgentStore = false;
    for (const CLI::Option* option : app.get_options()) {
      if (option->count() > 0 && !option->get_lnames().empty()) raw.given.insert(canonicalName(*option));
    }
    auto remaining = app.remaining();
    if (!remaining.empty()) {
      c.program = remaining.front();
      c.programArgs.assign(remaining.begin() + 1, remaining.end());
    }
    validate(c, raw);
  } catch (const CLI::CallForHelp& e) {
    outcome.exitCode = app.exit(e);
    return outcome;
  } catch (const CLI::ParseError& e) {
    std::cerr << "ddprun: " << e.what() << " (see --help)\n";
    outcome.exitCode = 2;
    return outcome;
  } catch (const std::exception& e) {
    std::cerr << "ddprun: " << e.what() << "\n";
    outcome.exitCode = 2;
    return outcome;
  }
  outcome.config = std::move(c);
  return outcome;
}

}  // namespace ddprun::launcher
