#include "launcher/config/launch_config.hpp"

#include <netdb.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string_view>

#include "common/env.hpp"
#include "common/error.hpp"
#include "common/random_id.hpp"
#include "common/version_text.hpp"
#include "launcher/config/local_host.hpp"
#include "launcher/config/scheduler_env.hpp"
#include "launcher/status/metrics_export.hpp"
#include "rendezvous/registry.hpp"

namespace ddprun::launcher {
namespace {

/// The parse in progress: the typed config plus the texts that are interpreted only once everything is in
/// (they depend on each other or on Slurm's defaults).
struct Parsing {
  LaunchArgs c;
  std::string nnodes = "1:1";
  std::string rdzvConf;
  std::set<std::string> given;  ///< options set by --config, a PET_ variable or a flag (canonical names)
};

/// Sets one option from its text; `where` names its source in errors ("--max-restarts",
/// "PET_MAX_RESTARTS", "--config job.json: max_restarts").
using Apply = void (*)(Parsing&, const std::string& value, const std::string& where);

/// One ddprun option, declared once: its section of --help, its spellings, its canonical name (the --config key and
/// the PET_ suffix), whether it is a flag, its help line, and how its value is checked and stored.
struct OptionSpec {
  const char* group;  ///< its section of --help, also its CLI11 option group
  const char* names;  ///< CLI11 spelling: "--nproc-per-node,--nproc_per_node"
  const char* key;    ///< "nproc_per_node"
  bool flag;
  const char* help;
  Apply apply;
};

bool parseBool(const std::string& text, const std::string& where) {
  if (text == "1" || text == "true" || text == "True" || text == "TRUE") return true;
  if (text == "0" || text == "false" || text == "False" || text == "FALSE") return false;
  throw ConfigError(where + ": expected true or false, got '" + text + "'");
}

int intIn(const std::string& text, const std::string& where, int64_t min, int64_t max) {
  return static_cast<int>(parseIntIn(text, where, min, max));
}

constexpr int64_t kMaxNodes = 100000;
constexpr int64_t kMaxLocalRank = kMaxNprocPerNode - 1;

std::pair<int, int> parseNnodes(const std::string& text, const std::string& where) {
  const auto colon = text.find(':');
  if (colon == std::string::npos) {
    const int n = intIn(text, where, 1, kMaxNodes);
    return {n, n};
  }
  return {intIn(text.substr(0, colon), where + " (MIN)", 1, kMaxNodes),
          intIn(text.substr(colon + 1), where + " (MAX)", 1, kMaxNodes)};
}

std::vector<int> parseRankList(const std::string& text, const std::string& where) {
  std::vector<int> ranks;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    if (!item.empty()) ranks.push_back(intIn(item, where, 0, kMaxLocalRank));
  }
  return ranks;
}

std::map<std::string, std::string> parseRdzvConfText(const std::string& text) {
  std::map<std::string, std::string> conf;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0) throw ConfigError("--rdzv-conf: expected key=value, got '" + item + "'");
    conf[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return conf;
}

/// torchrun's comma_separated_list: "a,b" -> {a, b}; ",," is a literal comma; an empty text is no filter.
std::vector<std::string> parseFilterList(const std::string& text) {
  std::vector<std::string> items;
  std::string item;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == ',' && i + 1 < text.size() && text[i + 1] == ',') {
      item += ',';
      ++i;
    } else if (text[i] == ',') {
      items.push_back(item);
      item.clear();
    } else {
      item += text[i];
    }
  }
  items.push_back(item);
  std::vector<std::string> filters;
  for (auto& each : items) {
    if (!each.empty()) filters.push_back(each);
  }
  return filters;
}

/// "SIGTERM,SIGUSR1" (names with or without SIG, or numbers) -> signal numbers; SIGKILL and SIGSTOP cannot be
/// handled, SIGCHLD, SIGTSTP, SIGCONT and SIGWINCH are ddprun's own.
std::vector<int> parseSignalList(const std::string& text, const std::string& where) {
  std::vector<int> signals;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    if (item.empty()) continue;
    int number = 0;
    if (std::isdigit(static_cast<unsigned char>(item[0]))) {
      number = intIn(item, where, 1, 64);
    } else {
      std::string name = item;
      for (char& ch : name) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      if (name.rfind("SIG", 0) == 0) name = name.substr(3);
      for (int n = 1; n < 32 && number == 0; ++n) {
        const char* abbreviation = ::sigabbrev_np(n);
        if (abbreviation != nullptr && name == abbreviation) number = n;
      }
      if (number == 0) throw ConfigError(where + ": unknown signal '" + item + "'");
    }
    for (int own : {SIGKILL, SIGSTOP, SIGCHLD, SIGTSTP, SIGCONT, SIGWINCH, SIGPIPE}) {
      if (number == own) throw ConfigError(where + ": " + item + " cannot be handled (ddprun needs it, or nobody can)");
    }
    signals.push_back(number);
  }
  if (signals.empty())
    throw ConfigError(where + ": expected a comma-separated list of signals such as SIGTERM,SIGUSR1");
  return signals;
}

// The sections of --help, in the order they appear. Each is a CLI11 option group, which also keeps CLI11's check
// for a repeated name within a section: CLI11 2.1 compares every added option with all before it, copying their
// names each time; 43 options in one list cost 1.7 M of the 2.6 M instructions an agent's main thread ran until it
// joined the rendezvous, in six sections 0.8 M (callgrind; 1,024 agents starting at once on two cores each pay it).
constexpr const char* kNodesGroup = "Nodes and rendezvous";
constexpr const char* kWorkersGroup = "Workers";
constexpr const char* kFailuresGroup = "Failures, restarts and stopping";
constexpr const char* kHangsGroup = "Hangs and stragglers";
constexpr const char* kLogsGroup = "Logs and console";
constexpr const char* kStatusGroup = "Status page";

/// Every ddprun option (torchrun's, plus ddprun's own), by section. Help text appears in --help as written.
const OptionSpec kOptions[] = {
    {kNodesGroup, "--nnodes", "nnodes", false, "N or MIN:MAX nodes",
     [](Parsing& p, const std::string& v, const std::string& w) {
       std::tie(p.c.minNodes, p.c.maxNodes) = parseNnodes(v, w);
       p.nnodes = v;
     }},
    {kNodesGroup, "--nproc-per-node,--nproc_per_node", "nproc_per_node", false, "workers per node: N, auto, cpu or gpu",
     [](Parsing& p, const std::string& v, const std::string& w) {
       if (v != "auto" && v != "cpu" && v != "gpu") intIn(v, w, 1, kMaxNprocPerNode);
       p.c.nprocPerNode = v;
     }},
    {kNodesGroup, "--node-rank,--node_rank", "node_rank", false, "this node's rank (static rendezvous)",
     [](Parsing& p, const std::string& v, const std::string& w) { p.c.nodeRank = intIn(v, w, 0, kMaxNodes - 1); }},
    {kNodesGroup, "--standalone", "standalone", true, "single node, local store on a free port, a fresh run id",
     [](Parsing& p, const std::string& v, const std::string& w) { p.c.standalone = parseBool(v, w); }},
    {kNodesGroup, "--rdzv-backend,--rdzv_backend", "rdzv_backend", false, "static, c10d or etcd-v3",
     [](Parsing& p, const std::string& v, const std::string& w) {
       if (rendezvous::findRendezvousBackend(v) == nullptr) {
         throw ConfigError(w + " " + v + ": expected " + rendezvous::rendezvousBackendNames());
       }
       p.c.rdzvBackend = v;
     }},
    {kNodesGroup, "--rdzv-endpoint,--rdzv_endpoint", "rdzv_endpoint", false,
     "host[:port] of the rendezvous store (c10d, port 29400) or of etcd (etcd-v3, port 2379)",
     [](Parsing& p, const std::string& v, const std::string&) { p.c.rdzvEndpoint = v; }},
    {kNodesGroup, "--rdzv-id,--rdzv_id", "rdzv_id", false, "job id shared by all nodes (TORCHELASTIC_RUN_ID)",
     [](Parsing& p, const std::string& v, const std::string& w) {
       if (v.empty() || v.find('/') != std::string::npos)
         throw ConfigError(w + ": expected a non-empty id without '/'");
       p.c.rdzvId = v;
     }},
    {kNodesGroup, "--rdzv-conf,--rdzv_conf", "rdzv_conf", false,
     "k1=v1,...: join_timeout, last_call_timeout, close_timeout, keep_alive_interval, keep_alive_max_attempt, "
     "read_timeout, is_host",
     [](Parsing& p, const std::string& v, const std::string&) { p.rdzvConf = v; }},
    {kNodesGroup, "--master-addr,--master_addr", "master_addr", false, "store address given to workers",
     [](Parsing& p, const std::string& v, const std::string& w) {
       if (v.empty()) throw ConfigError(w + ": expected a host name or address");
       p.c.masterAddr = v;
     }},
    {kNodesGroup, "--master-port,--master_port", "master_port", false, "store port",
     [](Parsing& p, const std::string& v, const std::string& w) {
       p.c.masterPort = intIn(v, w, 0, 65535);
       p.c.masterPortGiven = true;
     }},
    {kNodesGroup, "--local-addr,--local_addr", "local_addr", false, "address this node advertises",
     [](Parsing& p, const std::string& v, const std::string&) { p.c.localAddr = v; }},
    {kWorkersGroup, "--role", "role", false, "worker role name (ROLE_NAME)",
     [](Parsing& p, const std::string& v, const std::string& w) {
       if (v.empty()) throw ConfigError(w + ": expected a name");
       p.c.role = v;
     }},
    {kWorkersGroup, "--no-python,--no_python", "no_python", true, "run the program directly, never through Python",
     [](Parsing& p, const std::string& v, const std::string& w) { p.c.noPython = parseBool(v, w); }},
    {kWorkersGroup, "-m,--module", "module", true, "run the program as a Python module (python -m)",
     [](Parsing& p, const std::string& v, const std::string& w) { p.c.module = parseBool(v, w); }},
    {kWorkersGroup, "--run-path,--run_path", "run_path", true, "run the program as a Python file",
     [](Parsing& p, const std::string& v, const std::string& w) { p.c.runPath = parseBool(v, w); }},
    {kWorkersGroup, "--start-method,--start_method", "start_method", false,
     "spawn, fork or forkserver; forkserver forks every rank from one template start of a program that supports it "
     "(docs/launcher.md)",
     [](Parsing& p, const std::string& v, const std::string& w) {
       static const std::map<std::string, StartMethod> kMethods{
           {"spawn", StartMethod::kSpawn}, {"fork", StartMethod::kFork}, {"forkserver", StartMethod::kForkserver}};
       const auto method = kMethods.find(v);
       if (method == kMethods.end()) throw ConfigError(w + " " + v + ": expected spawn, fork or forkserver");
       p.c.startMethod = method->second;
     }},
    {kWorkersGroup, "--no-agent-store,--no_agent_store", "no_agent_store", true,
     "TORCHELASTIC_USE_AGENT_STORE=False: rank 0's worker hosts the store at MASTER_PORT",
     [](Parsing& p, const std::string& v, const std::string& w) { p.c.useAgentStore = !parseBool(v, w); }},
    {kWorkersGroup, "--numa-binding,--numa_binding", "numa_binding", false,
     "bind each worker to the CPUs and memory near its GPU (or spread over the machine's NUMA nodes): node, "
     "socket, exclusive or core-complex",
     [](Parsing& p, const std::string& v, const std::string& w) {
       if (v != "node" && v != "socket" && v != "exclusive" && v != "core-complex") {
         throw ConfigError(w + " " + v + ": expected node, socket, exclusive or core-complex");
       }
       p.c.numaBinding = v;
     }},
    {kWorkersGroup, "--virtual-local-rank,--virtual_local_rank", "virtual_local_rank", true,
     "LOCAL_RANK 0 in every worker, and CUDA_VISIBLE_DEVICES showing each worker only its own GPU",
     [](Parsing& p, const std::string& v, const std::string& w) { p.c.virtualLocalRank = parseBool(v, w); }},
    {kFailuresGroup, "--max-restarts,--max_restarts", "max_restarts", false, "worker group restarts before failing",
     [](Parsing& p, const std::string& v, const std::string& w) { p.c.maxRestarts = intIn(v, w, 0, 1000000); }},
    {kFailuresGroup, "--restart-scope,--restart_scope", "restart_scope", false,
     "group (default): a failure restarts every rank; rank: only the failed rank is replaced, for a program that "
     "supports it (docs/launcher.md)",
     [](Parsing& p, const std::string& v, const std::string& w) {
       if (v == "group") {
         p.c.restartScope = RestartScope::kGroup;
       } else if (v == "rank") {
         p.c.restartScope = RestartScope::kRank;
       } else {
         throw ConfigError(w + " " + v + ": expected group or rank");
       }
     }},
    {kFailuresGroup, "--max-no-progress-restarts,--max_no_progress_restarts", "max_no_progress_restarts", false,
     "attempts in a row without a new best step before ddprun gives up with exit code 93 (0: never)",
     [](Parsing& p, const std::string& v, const std::string& w) {
       p.c.maxNoProgressRestarts = intIn(v, w, 0, 1000000);
     }},
    {kFailuresGroup, "--monitor-interval,--monitor_interval", "monitor_interval", false,
     "seconds between the agent's periodic checks (exits are seen at once)",
     [](Parsing& p, const std::string& v, const std::string& w) {
       p.c.monitorInterval = parseSeconds(v, w, 0.001, 3600);
     }},
    {kFailuresGroup, "--stop-timeout,--stop_timeout", "stop_timeout", false,
     "seconds from SIGTERM to SIGKILL when stopping workers",
     [](Parsing& p, const std::string& v, const std::string& w) { p.c.stopTimeout = parseSeconds(v, w, 0, 86400); }},
    {kFailuresGroup, "--shutdown-timeout,--shutdown_timeout", "shutdown_timeout", false,
     "torchrun 2.x's name for --stop-timeout",
     [](Parsing& p, const std::string& v, const std::string& w) { p.c.stopTimeout = parseSeconds(v, w, 0, 86400); }},
    {kFailuresGroup, "--signals-to-handle,--signals_to_handle", "signals_to_handle", false,
     "signals forwarded to the workers (default SIGTERM,SIGINT,SIGHUP,SIGQUIT, which also stop the job; others, "
     "e.g. SIGUSR1 from Slurm, only reach the workers)",
     [](Parsing& p, const std::string& v, const std::string& w) { p.c.signalsToHandle = parseSignalList(v, w); }},
    {kHangsGroup, "--hang-timeout,--hang_timeout", "hang_timeout", false,
     "auto (default), off, or seconds without progress before a rank counts as hung (progress files)",
     [](Parsing& p, const std::string& v, const std::string& w) {
       if (v == "auto") {
         p.c.hang.mode = HangSettings::Mode::kAuto;
       } else if (v == "off") {
         p.c.hang.mode = HangSettings::Mode::kOff;
       } else {
         p.c.hang.mode = HangSettings::Mode::kFixed;
         p.c.hang.fixedSeconds = parseSeconds(v, w + " (auto, off or seconds)", 0.01, 7 * 86400);
       }
     }},
    {kHangsGroup, "--hang-min-timeout,--hang_min_timeout", "hang_min_timeout", false,
     "the least --hang-timeout auto ever waits, in seconds (default 5)",
     [](Parsing& p, const std::string& v, const std::string& w) {
       p.c.hang.minTimeoutSeconds = parseSeconds(v, w, 0.01, 7 * 86400);
     }},
    {kHangsGroup, "--hang-busy-timeout,--hang_busy_timeout", "hang_busy_timeout", false,
     "seconds a job may go without a step while ranks keep working before it counts as hung (default 1800)",
     [](Parsing& p, const std::string& v, const std::string& w) {
       p.c.hang.busyTimeoutSeconds = parseSeconds(v, w, 0.01, 7 * 86400);
     }},
    {kHangsGroup, "--hang-idle-timeout,--hang_idle_timeout", "hang_idle_timeout", false,
     "seconds a job may go without a step while every rank is idle outside any collective (a data wait, a "
     "warm-up: no deadlock) before it counts as hung (default 600)",
     [](Parsing& p, const std::string& v, const std::string& w) {
       p.c.hang.idleTimeoutSeconds = parseSeconds(v, w, 0.01, 7 * 86400);
     }},
    {kHangsGroup, "--hang-spin-timeout,--hang_spin_timeout", "hang_spin_timeout", false,
     "seconds a rank may use CPU alone with its main thread in one place (in Python: no new line or variable value) "
     "while a peer waits in a collective before it counts as spinning (default 30, or 20 x the longest step when "
     "longer)",
     [](Parsing& p, const std::string& v, const std::string& w) {
       p.c.hang.spinTimeoutSeconds = parseSeconds(v, w, 0.01, 7 * 86400);
     }},
    {kHangsGroup, "--hang-spin-action,--hang_spin_action", "hang_spin_action", false,
     "what a spin leads to: report (default: a warning, the rank's stacks and the status page; the group is stopped "
     "only at --hang-busy-timeout) or restart (the group is stopped and restarted as for a hang)",
     [](Parsing& p, const std::string& v, const std::string& w) {
       if (v != "report" && v != "restart") throw ConfigError(w + ": expected report or restart, got '" + v + "'");
       p.c.hang.spinAction = v == "report" ? HangSettings::SpinAction::kReport : HangSettings::SpinAction::kRestart;
     }},
    {kHangsGroup, "--watch-record,--watch_record", "watch_record", false,
     "write what the hang watch reads of the ranks to this file, one JSON object a line (docs/watching.md)",
     [](Parsing& p, const std::string& v, const std::string&) { p.c.watchRecord = v; }},
    {kHangsGroup, "--output-timeout,--output_timeout", "output_timeout", false,
     "seconds without any output before a rank counts as hung (off by default)",
     [](Parsing& p, const std::string& v, const std::string& w) {
       if (v == "off") {
         p.c.hang.outputTimeoutSeconds.reset();
       } else {
         p.c.hang.outputTimeoutSeconds = parseSeconds(v, w, 0.01, 7 * 86400);
       }
     }},
    {kHangsGroup, "--straggler-factor,--straggler_factor", "straggler_factor", false,
     "a rank whose pace is this many times below the others' median is a straggler (default 1.5)",
     [](Parsing& p, const std::string& v, const std::string& w) {
       p.c.straggler.factor = parseNumber(v, w, 1.0, 1000);
     }},
    {kHangsGroup, "--straggler-window,--straggler_window", "straggler_window", false,
     "seconds over which ranks' paces are compared (default 10)",
     [](Parsing& p, const std::string& v, const std::string& w) {
       p.c.straggler.windowSeconds = parseSeconds(v, w, 0.1, 86400);
     }},
    {kLogsGroup, "--log-dir,--log_dir", "log_dir", false, "base dir of the per-run worker logs and error files",
     [](Parsing& p, const std::string& v, const std::string&) { p.c.logDir = v; }},
    {kLogsGroup, "-r,--redirects", "redirects", false, "send worker std streams to files only: 0..3 or rank:mask,...",
     [](Parsing& p, const std::string& v, const std::string& w) { p.c.redirects = parseStdMask(v, w); }},
    {kLogsGroup, "-t,--tee", "tee", false, "send worker std streams to files and console: 0..3 or rank:mask,...",
     [](Parsing& p, const std::string& v, const std::string& w) { p.c.tee = parseStdMask(v, w); }},
    {kLogsGroup, "--local-ranks-filter,--local_ranks_filter", "local_ranks_filter", false,
     "local ranks shown on the console",
     [](Parsing& p, const std::string& v, const std::string& w) { p.c.localRanksFilter = parseRankList(v, w); }},
    {kLogsGroup, "--no-tty,--no_tty", "no_tty", true,
     "pipes for worker output even when ddprun's console is a terminal (no pseudo-terminals)",
     [](Parsing& p, const std::string& v, const std::string& w) { p.c.allowTerminal = !parseBool(v, w); }},
    {kLogsGroup, "--duplicate-stdout-filters,--duplicate_stdout_filters", "duplicate_stdout_filters", false,
     "also write the workers' stdout lines containing any of these comma-separated texts (',,' for a comma) to "
     "filtered_stdout.log in the attempt's log directory",
     [](Parsing& p, const std::string& v, const std::string&) { p.c.duplicateStdoutFilters = parseFilterList(v); }},
    {kLogsGroup, "--duplicate-stderr-filters,--duplicate_stderr_filters", "duplicate_stderr_filters", false,
     "the same for stderr, into filtered_stderr.log",
     [](Parsing& p, const std::string& v, const std::string&) { p.c.duplicateStderrFilters = parseFilterList(v); }},
    {kLogsGroup, "--event-log-handler,--event_log_handler", "event_log_handler", false,
     "torchelastic's event handler: null (default), dynamic_rendezvous (as null) or console (one JSON line per "
     "attempt event in ddprun's log)",
     [](Parsing& p, const std::string& v, const std::string& w) {
       // torch 2.x's handlers (torch/distributed/elastic/events/handlers.py): dynamic_rendezvous is a null handler.
       if (v != "null" && v != "console" && v != "dynamic_rendezvous") {
         throw ConfigError(w + " " + v + ": expected null, dynamic_rendezvous or console");
       }
       p.c.eventLogHandler = v == "dynamic_rendezvous" ? "null" : v;
     }},
    {kLogsGroup, "--logs-specs,--logs_specs", "logs_specs", false,
     "torchrun's log layout plug-in: only its default (DefaultLogsSpecs) is supported",
     [](Parsing&, const std::string& v, const std::string& w) {
       if (!v.empty() && v != "DefaultLogsSpecs" && v != "default") {
         throw ConfigError(w + " " + v +
                           ": ddprun writes torchrun's default layout (DefaultLogsSpecs); custom "
                           "LogsSpecs are Python entry points it cannot load");
       }
     }},
    {kStatusGroup, "--status-port,--status_port", "status_port", false,
     "serve a status page, /status.json and /metrics on this port (0: a free one, logged); off by default",
     [](Parsing& p, const std::string& v, const std::string& w) { p.c.statusPort = intIn(v, w, 0, 65535); }},
    {kStatusGroup, "--status-host,--status_host", "status_host", false,
     "address the status page listens on (default 127.0.0.1)",
     [](Parsing& p, const std::string& v, const std::string& w) {
       if (v.empty()) throw ConfigError(w + ": expected an address");
       p.c.statusHost = v;
     }},
    {kStatusGroup, "--metrics-textfile,--metrics_textfile", "metrics_textfile", false,
     "at the end, write the final metrics to this file, atomically (node_exporter's textfile collector: a *.prom "
     "file in its --collector.textfile.directory)",
     [](Parsing& p, const std::string& v, const std::string& w) {
       if (v.empty()) throw ConfigError(w + ": expected a file name");
       p.c.metricsTextfile = v;
     }},
    {kStatusGroup, "--metrics-push,--metrics_push", "metrics_push", false,
     "at the end, PUT the final metrics to this Pushgateway, http://HOST:PORT[/metrics/job/...] (without a path: "
     "job ddprun, instance this host)",
     [](Parsing& p, const std::string& v, const std::string& w) {
       try {
         status::parsePushUrl(v);
       } catch (const std::invalid_argument& e) {
         throw ConfigError(w + " " + v + ": " + e.what());
       }
       p.c.metricsPush = v;
     }},
};

/// torchrun's own flags (torch/distributed/run.py, get_args_parser, torch 1.13 and 2.x), by key.
bool isTorchrunOption(std::string_view key) {
  static constexpr std::array<std::string_view, 30> kKeys = {"nnodes",
                                                             "nproc_per_node",
                                                             "rdzv_backend",
                                                             "rdzv_endpoint",
                                                             "rdzv_id",
                                                             "rdzv_conf",
                                                             "standalone",
                                                             "max_restarts",
                                                             "monitor_interval",
                                                             "start_method",
                                                             "role",
                                                             "module",
                                                             "no_python",
                                                             "run_path",
                                                             "log_dir",
                                                             "redirects",
                                                             "tee",
                                                             "local_ranks_filter",
                                                             "node_rank",
                                                             "master_addr",
                                                             "master_port",
                                                             "local_addr",
                                                             "logs_specs",
                                                             "numa_binding",
                                                             "event_log_handler",
                                                             "signals_to_handle",
                                                             "virtual_local_rank",
                                                             "duplicate_stdout_filters",
                                                             "duplicate_stderr_filters",
                                                             "shutdown_timeout"};
  return std::find(kKeys.begin(), kKeys.end(), key) != kKeys.end();
}

const OptionSpec* findByKey(const std::string& key) {
  for (const auto& spec : kOptions) {
    if (key == spec.key) return &spec;
  }
  return nullptr;
}

/// The comma-separated spellings in `names` ("-n,--nproc-per-node,--nproc_per_node"), in order. Split by hand, not
/// with a stringstream (a stringstream sets up a locale each time).
std::vector<std::string_view> splitSpellings(std::string_view names) {
  std::vector<std::string_view> out;
  for (size_t from = 0; from <= names.size();) {
    const size_t comma = std::min(names.find(',', from), names.size());
    out.push_back(names.substr(from, comma - from));
    from = comma + 1;
  }
  return out;
}

/// The spellings of `spec`, split once per process: every agent matches each of its arguments against every option
/// at start, and splitting them anew for each would cost more than the matching.
const std::vector<std::string_view>& spellings(const OptionSpec& spec) {
  static const std::vector<std::vector<std::string_view>> all = [] {
    std::vector<std::vector<std::string_view>> split;
    for (const auto& each : kOptions) split.push_back(splitSpellings(each.names));
    return split;
  }();
  return all[static_cast<size_t>(&spec - kOptions)];
}

/// All long spellings of `spec` ("--nproc-per-node", "--nproc_per_node").
std::vector<std::string> longNames(const OptionSpec& spec) {
  std::vector<std::string> names;
  for (const auto name : spellings(spec)) {
    if (name.rfind("--", 0) == 0) names.emplace_back(name);
  }
  return names;
}

/// Whether `arg` (up to '=') names an option that takes a value: its value is the next argument.
bool takesValue(const std::string& arg) {
  if (arg.find('=') != std::string::npos) return false;
  if (arg == "--config") return true;
  for (const auto& spec : kOptions) {
    if (spec.flag) continue;
    for (const auto each : spellings(spec)) {
      if (each == arg) return true;
    }
  }
  return false;
}

/// Where ddprun's own options end in `args` (prefixes already expanded): at the program (the first argument that is
/// empty or does not start with '-') or at "--"; an option's value is stepped over.
size_t optionsEnd(const std::vector<std::string>& args) {
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.empty() || arg[0] != '-' || arg == "--") break;
    if (takesValue(arg) && i + 1 < args.size()) ++i;
  }
  return i;
}

/// --config must be read before the flags so that flags override it: the first one among ddprun's own options,
/// args[0, end) (optionsEnd: what follows is the program's).
std::optional<std::string> findConfigPath(const std::vector<std::string>& args, size_t end) {
  for (size_t i = 0; i < end; ++i) {
    const std::string& arg = args[i];
    if (arg == "--config" && i + 1 < args.size()) return args[i + 1];
    if (arg.rfind("--config=", 0) == 0) return arg.substr(9);
    if (takesValue(arg)) ++i;
  }
  return std::nullopt;
}

std::string jsonToText(const nlohmann::json& value, const std::string& where) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_boolean()) return value.get<bool>() ? "true" : "false";
  if (value.is_number()) return value.dump();
  throw ConfigError(where + ": expected a string, a number or true/false");
}

/// nlohmann's parser recurses once per nesting level: a deeply nested file would overflow the stack.
void checkNesting(const std::string& text, const std::string& path) {
  constexpr int kMaxDepth = 64;
  int depth = 0;
  bool inString = false, escaped = false;
  for (char ch : text) {
    if (inString) {
      if (escaped)
        escaped = false;
      else if (ch == '\\')
        escaped = true;
      else if (ch == '"')
        inString = false;
    } else if (ch == '"') {
      inString = true;
    } else if (ch == '{' || ch == '[') {
      if (++depth > kMaxDepth) throw ConfigError("--config " + path + ": nested deeper than 64 levels");
    } else if (ch == '}' || ch == ']') {
      --depth;
    }
  }
}

/// Applies a configs/-style JSON file; option names as on the command line, '-' or '_' alike.
void applyConfigFile(const std::string& path, Parsing& p) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError("--config: cannot read " + path);
  // A bound: a config is a few hundred bytes, and /dev/zero or a FIFO that never ends must not be read for ever.
  constexpr std::streamsize kMaxConfigBytes = 1 << 20;
  std::string text(static_cast<size_t>(kMaxConfigBytes) + 1, '\0');
  in.read(text.data(), kMaxConfigBytes + 1);
  if (in.bad()) throw ConfigError("--config: cannot read " + path);
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > static_cast<size_t>(kMaxConfigBytes)) {
    throw ConfigError("--config " + path + ": longer than 1 MiB; not a ddprun config (configs/ holds examples)");
  }
  checkNesting(text, path);
  nlohmann::json json;
  // JSON leaves a key given twice to the reader (nlohmann keeps the last): here it is an error, never a silent
  // choice between two values.
  std::vector<std::set<std::string>> keysOfObject;
  std::string duplicate;
  auto noDuplicateKeys = [&](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    if (event == Event::object_start) keysOfObject.emplace_back();
    if (event == Event::object_end && !keysOfObject.empty()) keysOfObject.pop_back();
    if (event == Event::key && !keysOfObject.empty() && !keysOfObject.back().insert(parsed.get<std::string>()).second &&
        duplicate.empty()) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  try {
    json = nlohmann::json::parse(text, noDuplicateKeys);
  } catch (const std::exception& e) {
    throw ConfigError("--config " + path + ": not valid JSON: " + e.what());
  }
  if (!duplicate.empty()) throw ConfigError("--config " + path + ": key '" + duplicate + "' given twice");
  if (!json.is_object()) throw ConfigError("--config " + path + ": expected a JSON object");
  std::set<std::string> seen;
  for (const auto& [rawKey, value] : json.items()) {
    std::string key = rawKey;
    for (char& ch : key) ch = ch == '-' ? '_' : ch;
    const std::string where = "--config " + path + ": " + rawKey;
    if (!seen.insert(key).second) throw ConfigError("--config " + path + ": option '" + rawKey + "' given twice");
    if (key == "program" || key == "training_script") {
      p.c.program = jsonToText(value, where);
    } else if (key == "args" || key == "training_script_args") {
      if (!value.is_array()) throw ConfigError(where + ": expected an array of strings");
      p.c.programArgs.clear();
      for (const auto& arg : value) {
        if (!arg.is_string()) throw ConfigError(where + ": expected an array of strings");
        p.c.programArgs.push_back(arg.get<std::string>());
      }
    } else if (const OptionSpec* spec = findByKey(key)) {
      spec->apply(p, jsonToText(value, where), where);
      p.given.insert(key);
    } else {
      throw ConfigError("--config " + path + ": unknown option '" + rawKey + "'");
    }
  }
}

/// torchrun reads PET_<OPTION> for every option not on the command line (torch/distributed/argparse_util.py);
/// Kubeflow's PyTorchJob sets them, so the same container command works there unchanged.
void applyTorchrunEnvironment(Parsing& p, const std::set<std::string>& onCommandLine) {
  for (const auto& spec : kOptions) {
    if (onCommandLine.count(spec.key)) continue;
    std::string name = std::string("PET_") + spec.key;
    for (char& ch : name) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    if (auto value = getEnv(name)) {
      spec.apply(p, *value, name);
      p.given.insert(spec.key);
    }
  }
}

/// Slurm's variables fill the options a node's command line leaves out (docs/schedulers.md).
void applySchedulerDefaults(Parsing& p) {
  LaunchArgs& c = p.c;
  if (c.standalone) return;  // one node on purpose, even inside a Slurm allocation
  const SchedulerDefaults slurm = slurmDefaults([](const std::string& name) { return getEnv(name); });
  if (slurm.source.empty()) return;
  std::vector<std::string> applied;
  const std::string where = slurm.source + "'s environment";
  if (slurm.nnodes && !p.given.count("nnodes")) {
    std::tie(c.minNodes, c.maxNodes) = parseNnodes(*slurm.nnodes, where + " (--nnodes)");
    p.nnodes = *slurm.nnodes;
    applied.push_back("--nnodes " + *slurm.nnodes);
  }
  if (slurm.nodeRank && !p.given.count("node_rank")) {
    c.nodeRank = *slurm.nodeRank;
    applied.push_back("--node-rank " + std::to_string(*slurm.nodeRank));
  }
  if (slurm.rdzvEndpointHost) {
    const bool dynamic = rendezvous::findRendezvousBackend(c.rdzvBackend)->dynamic;
    if (!dynamic && !p.given.count("master_addr")) {
      c.masterAddr = *slurm.rdzvEndpointHost;
      applied.push_back("--master-addr " + c.masterAddr);
    } else if (dynamic && !p.given.count("rdzv_endpoint")) {
      c.rdzvEndpoint = *slurm.rdzvEndpointHost;
      applied.push_back("--rdzv-endpoint " + c.rdzvEndpoint);
    }
  }
  if (slurm.rdzvId && !p.given.count("rdzv_id")) {
    c.rdzvId = *slurm.rdzvId;
    applied.push_back("--rdzv-id " + c.rdzvId);
  }
  if (!applied.empty()) {
    std::string list;
    for (const auto& item : applied) list += (list.empty() ? "" : ", ") + item;
    std::cerr << "ddprun: from " << where << ": " << list << "\n";
  }
}

/// Picks single-node, static or dynamic rendezvous and checks the options each needs.
void chooseRendezvousMode(Parsing& p) {
  LaunchArgs& c = p.c;
  const rendezvous::RendezvousBackendInfo& backend = *rendezvous::findRendezvousBackend(c.rdzvBackend);
  if (c.standalone) {
    c.mode = RendezvousMode::kSingleNode;
    return;
  }
  if (!backend.dynamic) {
    if (c.minNodes != c.maxNodes) {
      throw ConfigError("--nnodes " + p.nnodes +
                        ": static rendezvous needs a fixed node count; use "
                        "--rdzv-backend c10d (or etcd-v3) for MIN:MAX");
    }
    if (c.nodeRank >= c.minNodes) {
      throw ConfigError("--node-rank " + std::to_string(c.nodeRank) + ": must be below --nnodes " + p.nnodes);
    }
    c.mode = c.minNodes > 1 ? RendezvousMode::kStatic : RendezvousMode::kSingleNode;
    if (!c.rdzvEndpoint.empty()) {
      // torchrun's static rendezvous takes the endpoint, when given, over --master-addr/--master-port.
      std::tie(c.masterAddr, c.masterPort) =
          parseEndpoint(c.rdzvEndpoint, c.masterPort, "--rdzv-endpoint", c.mode == RendezvousMode::kSingleNode);
    } else if (c.mode == RendezvousMode::kSingleNode && !c.masterPortGiven) {
      c.masterPort = 0;  // as torchrun 2.x: one node without an endpoint or a port gets a free port
    }
    c.rdzvHost = c.masterAddr;
    c.rdzvPort = c.masterPort;
    if (c.mode == RendezvousMode::kStatic) {
      if (c.masterPort == 0) throw ConfigError("--master-port 0: the nodes of a static job need a known port");
      if (!c.useAgentStore) {
        throw ConfigError(
            "--no-agent-store: static nodes share node 0's store (its agent serves it); use "
            "--rdzv-backend c10d for rank 0's worker to host the workers' store");
      }
    }
    return;
  }
  if (c.rdzvEndpoint.empty()) {
    if (!backend.storeAtEndpoint) {
      throw ConfigError("--rdzv-backend " + c.rdzvBackend + " needs --rdzv-endpoint host:port");
    }
    if (c.maxNodes > 1) {
      throw ConfigError("--nnodes " + p.nnodes + " with --rdzv-backend c10d needs --rdzv-endpoint host[:port]");
    }
    c.mode = RendezvousMode::kSingleNode;  // torchrun's --rdzv-backend c10d on one node without an endpoint
    return;
  }
  std::tie(c.rdzvHost, c.rdzvPort) =
      parseEndpoint(c.rdzvEndpoint, backend.defaultPort, "--rdzv-endpoint", c.maxNodes == 1);
  if (c.maxNodes == 1 && backend.storeAtEndpoint) {
    // One node: nobody else joins, so the endpoint is simply where this node's store listens (port 0: a free one).
    c.mode = RendezvousMode::kSingleNode;
    c.masterAddr = c.rdzvHost;
    c.masterPort = c.rdzvPort;
    return;
  }
  c.mode = RendezvousMode::kDynamic;
}

/// The option spelled most like `typo` (Levenshtein distance, at most a third of its length); "" when none is.
std::string nearestOption(const std::string& typo) {
  const std::string name = typo.substr(0, typo.find('='));
  const auto distance = [](const std::string& a, const std::string& b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      size_t diagonal = row[0];
      row[0] = i;
      for (size_t j = 1; j <= b.size(); ++j) {
        const size_t above = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
        diagonal = above;
      }
    }
    return row[b.size()];
  };
  std::string best;
  size_t bestDistance = std::max<size_t>(2, name.size() / 3) + 1;
  for (const auto& spec : kOptions) {
    for (const auto& each : longNames(spec)) {
      const size_t d = distance(name, each);
      if (d < bestDistance) {
        bestDistance = d;
        best = longNames(spec).front();
      }
    }
  }
  return best;
}

/// A host the workers are told to reach must resolve now, not after --timeout in every worker.
void checkResolves(const std::string& host, const std::string& flag) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (found != nullptr) ::freeaddrinfo(found);
  if (rc != 0) throw ConfigError(flag + " " + host + ": cannot resolve it (" + ::gai_strerror(rc) + ")");
}

void validate(Parsing& p) {
  LaunchArgs& c = p.c;
  applySchedulerDefaults(p);
  if (c.maxNodes < c.minNodes) {
    throw ConfigError("--nnodes: expected N or MIN:MAX with 1 <= MIN <= MAX, got '" + p.nnodes + "'");
  }
  c.rdzvConf = parseRdzvConfText(p.rdzvConf);
  c.rdzv = parseRendezvousConf(c.rdzvConf);
  if (c.program.empty()) throw ConfigError("no program given: ddprun [options] program [args...]");
  // CLI11's prefix mode hands an unknown flag over as the program; it is a typo, not a program.
  if (c.program[0] == '-') {
    const std::string nearest = nearestOption(c.program);
    throw ConfigError("unknown option '" + c.program + "'" +
                      (nearest.empty() ? "" : "; did you mean " + nearest + "?") + " (see --help)");
  }
  if (c.noPython && (c.module || c.runPath)) throw ConfigError("--no-python cannot be combined with -m/--run-path");
  if (c.standalone) {
    c.rdzvBackend = "c10d";
    // torchrun gives a standalone job a fresh uuid4 as its run id; an explicit --rdzv-id is kept.
    if (!p.given.count("rdzv_id")) c.rdzvId = randomUuid();
    if (c.minNodes != 1 || c.maxNodes != 1) throw ConfigError("--standalone runs one node: --nnodes must be 1");
  }
  chooseRendezvousMode(p);
  // One node without --rdzv-id has no peer to agree with on it: a fresh id too (torchrun keeps "none", which names
  // no run on the status page, in the report or in the log directory).
  if (c.mode == RendezvousMode::kSingleNode && !p.given.count("rdzv_id") && c.rdzvId == "none") c.rdzvId = randomUuid();
  // torchrun 2.x: without --shutdown-timeout, TORCH_ELASTIC_SHUTDOWN_TIMEOUT, else 30 s.
  if (!p.given.count("stop_timeout") && !p.given.count("shutdown_timeout")) {
    if (const auto fromEnv = getEnv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT")) {
      c.stopTimeout = parseSeconds(*fromEnv, "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", 0, 86400);
    }
  }
  // The node that serves the workers' store binds this address and its workers are told it.
  if (c.mode == RendezvousMode::kSingleNode || (c.mode == RendezvousMode::kStatic && c.nodeRank == 0)) {
    checkResolves(c.masterAddr, p.given.count("rdzv_endpoint") ? "--rdzv-endpoint" : "--master-addr");
  }
  // One node advertises its address to nobody, but an address that is not this machine's is still a mistake.
  if (c.mode == RendezvousMode::kSingleNode && !c.localAddr.empty() && !isThisMachine(c.localAddr)) {
    throw ConfigError("--local-addr " + c.localAddr + ": not an address of this machine");
  }
}

const char* kEnvironmentHelp =
    "\nEnvironment variables read by ddprun:\n"
    "  PET_<OPTION>        any option above not given as a flag (torchrun's convention, e.g. PET_NNODES)\n"
    "  PYTHON_EXEC         the interpreter for Python programs (torchrun 2.x); then DDPRUN_PYTHON, then python3\n"
    "  DDPRUN_PYTHON       the interpreter for Python programs when PYTHON_EXEC is unset\n"
    "  DDPRUN_LOG_LEVEL    ddprun's log level: debug, info, warning, error (default info)\n"
    "  LOGLEVEL            torchrun's name for the same, used when DDPRUN_LOG_LEVEL is unset\n"
    "  TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE  console prefix of worker lines, with ${role_name}, ${rank},\n"
    "                      ${local_rank} (default [rank${rank}]:)\n"
    "  OMP_NUM_THREADS     passed on; set to 1 for each worker when unset and there are several\n"
    "  SLURM_*             node count, node rank, endpoint host and job id under Slurm (docs/schedulers.md)\n"
    "  CUDA_VISIBLE_DEVICES  which GPUs --nproc-per-node gpu/auto counts\n";

}  // namespace

std::vector<std::string> expandOptionPrefixes(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  out.reserve(args.size());
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.empty() || arg[0] != '-') break;  // the program
    if (arg == "--") break;
    std::string expanded = arg;
    if (arg.rfind("--", 0) == 0 && arg.size() > 2) {
      const auto eq = arg.find('=');
      const std::string name = arg.substr(0, eq);
      const std::string rest = eq == std::string::npos ? "" : arg.substr(eq);
      std::vector<std::string> exact, matches, torchrunMatches;
      for (const auto& spec : kOptions) {
        std::string_view first;  // the option's first long spelling
        bool prefixOfOne = false;
        for (const auto each : spellings(spec)) {
          if (each.rfind("--", 0) != 0) continue;
          if (first.empty()) first = each;
          if (each == name) exact.emplace_back(each);
          if (each.rfind(name, 0) == 0) prefixOfOne = true;
        }
        if (prefixOfOne) matches.emplace_back(first);  // one per option: its spellings are the same option
        if (prefixOfOne && isTorchrunOption(spec.key)) torchrunMatches.emplace_back(first);
      }
      // A prefix torchrun reads as one of its flags means that flag here too, whatever ddprun's own flags it also
      // begins (--max: torchrun's --max-restarts, not also --max-no-progress-restarts).
      if (exact.empty() && matches.size() > 1 && torchrunMatches.size() == 1) matches = torchrunMatches;
      for (const char* own : {"--config", "--help", "--version"}) {
        if (name == own)
          exact.push_back(own);
        else if (std::string(own).rfind(name, 0) == 0)
          matches.push_back(own);
      }
      if (exact.empty() && matches.size() == 1) expanded = matches.front() + rest;
      if (exact.empty() && matches.size() > 1) {
        std::string list;
        for (const auto& m : matches) list += (list.empty() ? "" : ", ") + m;
        throw ConfigError("ambiguous option: " + name + " could match " + list);
      }
    }
    out.push_back(expanded);
    if (takesValue(expanded) && i + 1 < args.size()) out.push_back(args[++i]);
  }
  out.insert(out.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  return out;
}

RendezvousConf parseRendezvousConf(const std::map<std::string, std::string>& raw) {
  RendezvousConf conf;
  // Below 10 ms the millisecond timers would round to zero and spin.
  auto seconds = [](const std::string& key, const std::string& text, double maxSeconds) {
    return parseSeconds(text, "--rdzv-conf " + key, 0.01, maxSeconds);
  };
  for (const auto& [key, text] : raw) {
    if (key == "join_timeout")
      conf.joinTimeout = seconds(key, text, 86400 * 7);
    else if (key == "last_call_timeout")
      conf.lastCallTimeout = seconds(key, text, 86400);
    else if (key == "close_timeout")
      conf.closeTimeout = seconds(key, text, 86400);
    else if (key == "keep_alive_interval")
      conf.keepAliveInterval = seconds(key, text, 3600);
    // `timeout` is the legacy etcd rendezvous' name for the same per-call limit.
    else if (key == "read_timeout" || key == "timeout")
      conf.readTimeout = seconds(key, text, 86400);
    else if (key == "keep_alive_max_attempt") {
      conf.keepAliveMaxAttempt = static_cast<int>(parseIntIn(text, "--rdzv-conf keep_alive_max_attempt", 1, 1000));
    } else if (key == "is_host") {
      conf.isHost = parseBool(text, "--rdzv-conf is_host");
    } else if (key == "heartbeat_timeout" || key == "store_type" || key == "use_libuv" || key == "rank") {
      // torchrun-specific tuning with no meaning for ddprun's store; accepted so torchrun commands work.
    } else {
      throw ConfigError("--rdzv-conf: unknown key '" + key +
                        "' (known: join_timeout, last_call_timeout, close_timeout, keep_alive_interval, "
                        "keep_alive_max_attempt, read_timeout (or timeout), is_host; accepted and ignored: "
                        "heartbeat_timeout, store_type, use_libuv, rank)");
    }
  }
  return conf;
}

std::pair<std::string, int> parseEndpoint(const std::string& text, int defaultPort, const std::string& flag,
                                          bool allowFreePort) {
  const int lowest = allowFreePort ? 0 : 1;
  std::string host = text;
  int port = defaultPort;
  const auto colon = text.rfind(':');
  if (text.size() > 1 && text.front() == '[') {  // [v6 address]:port
    const auto close = text.find(']');
    if (close == std::string::npos) throw ConfigError(flag + " " + text + ": unbalanced '['");
    host = text.substr(1, close - 1);
    if (close + 1 < text.size()) {
      if (text[close + 1] != ':') throw ConfigError(flag + " " + text + ": expected [host]:port");
      port = intIn(text.substr(close + 2), flag + " (port)", lowest, 65535);
    }
  } else if (colon != std::string::npos && text.find(':') == colon) {
    host = text.substr(0, colon);
    port = intIn(text.substr(colon + 1), flag + " (port)", lowest, 65535);
  }
  // A bare IPv6 address ("::1") has several colons and no port.
  if (host.empty()) throw ConfigError(flag + " " + text + ": no host");
  if (port < lowest || port > 65535) throw ConfigError(flag + " " + text + ": port must be 1..65535");
  return {host, port};
}

std::map<int, int> parseStdMask(const std::string& text, const std::string& flag) {
  std::map<int, int> masks;
  auto checkMask = [&](const std::string& m) {
    try {
      return intIn(m, flag, 0, 3);
    } catch (const ConfigError&) {
      throw ConfigError(flag +
                        ": expected 0..3 (1 stdout, 2 stderr, 3 both) or local_rank:mask pairs such as 0:3,1:1, got '" +
                        text + "'");
    }
  };
  if (text.find(':') == std::string::npos) {
    masks[-1] = checkMask(text);
    return masks;
  }
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    const auto colon = item.find(':');
    if (colon == std::string::npos) throw ConfigError(flag + ": expected rank:mask pairs, got '" + text + "'");
    masks[intIn(item.substr(0, colon), flag + " (local rank)", 0, kMaxLocalRank)] = checkMask(item.substr(colon + 1));
  }
  return masks;
}

namespace {

/// CLI11's help with ddprun's own usage line (its default, "Usage: [OPTIONS]", leaves out the program), and each
/// option group as one titled section ("Workers:") instead of CLI11's "[Option Group: Workers]" with a nested
/// "Options:".
class UsageFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override {
    return "usage: ddprun [options] program [args...]\n";
  }
  std::string make_expanded(const CLI::App* group) const override {
    return make_groups(group, CLI::AppFormatMode::Sub);
  }
};

}  // namespace

ParseOutcome parseLaunchArgs(int argc, char** argv) {
  ParseOutcome outcome;
  Parsing p;
  CLI::App app{"ddprun: launch and supervise a DDP worker group, torchrun-compatible"};
  app.formatter(std::make_shared<UsageFormatter>());
  app.prefix_command();  // everything from the program on belongs to the program
  app.footer(kEnvironmentHelp);
  std::string configPath;
  app.add_option("--config", configPath, "JSON file with these options (flags override it)");
  app.set_version_flag("--version", versionText("ddprun"));
  std::vector<std::pair<const OptionSpec*, CLI::Option*>> cliOptions;
  std::map<std::string, CLI::Option_group*> groups;
  for (const auto& spec : kOptions) {
    CLI::Option_group*& group = groups[spec.group];
    if (group == nullptr) group = app.add_option_group(spec.group);
    CLI::Option* option = spec.flag ? group->add_flag(spec.names, spec.help) : group->add_option(spec.names, spec.help);
    option->group(spec.group);
    // argparse (torchrun) takes the last of a repeated option; so do we.
    option->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    cliOptions.emplace_back(&spec, option);
  }
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    args = expandOptionPrefixes(args);
    const size_t ownEnd = optionsEnd(args);
    if (auto path = findConfigPath(args, ownEnd)) applyConfigFile(*path, p);
    // Only ddprun's own options go to CLI11, not the program and its arguments: CLI11 2.1 would take an empty program
    // name ("") for one of the nameless option groups and then loop forever on the option after it.
    const auto program = args.begin() + static_cast<std::ptrdiff_t>(ownEnd);
    std::vector<std::string> reversed(std::make_reverse_iterator(program), args.rend());  // CLI11 takes them reversed
    app.parse(reversed);
    std::set<std::string> onCommandLine;
    for (const auto& [spec, option] : cliOptions) {
      if (option->count() == 0) continue;
      onCommandLine.insert(spec->key);
    }
    applyTorchrunEnvironment(p, onCommandLine);
    for (const auto& [spec, option] : cliOptions) {
      if (option->count() == 0) continue;
      const std::string where = longNames(*spec).front();
      spec->apply(p, spec->flag ? "true" : option->results().back(), where);
      p.given.insert(spec->key);
    }
    auto remaining = app.remaining();  // an option CLI11 did not know, and what followed it
    remaining.insert(remaining.end(), program, args.end());
    // "ddprun [options] -- program args": the "--" only ends ddprun's options (argparse's REMAINDER keeps it out).
    if (!remaining.empty() && remaining.front() == "--") remaining.erase(remaining.begin());
    if (!remaining.empty()) {
      p.c.program = remaining.front();
      p.c.programArgs.assign(remaining.begin() + 1, remaining.end());
    }
    validate(p);
  } catch (const CLI::CallForHelp& e) {
    outcome.exitCode = app.exit(e);
    return outcome;
  } catch (const CLI::CallForVersion& e) {
    outcome.exitCode = app.exit(e);
    return outcome;
  } catch (const CLI::ArgumentMismatch& e) {
    // CLI11 says "--flag: 1 required  missing"; say it as one plain line.
    const std::string what = e.what();
    const bool missing = what.find("missing") != std::string::npos;
    std::cerr << "ddprun: " << (missing ? what.substr(0, what.find(':')) + " needs a value" : what)
              << " (see --help)\n";
    outcome.exitCode = 2;
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
  outcome.config = std::move(p.c);
  return outcome;
}

}  // namespace ddprun::launcher
