#pragma once
// ddprun's command line: torchrun's flags in both spellings (--nproc-per-node and --nproc_per_node) and
// argparse's unambiguous prefixes (--nproc), an optional --config FILE.json with the same option names,
// torchrun's PET_<OPTION> variables, then the program and its arguments. Every option is declared once, in
// one table (launch_config.cpp) that feeds all of these with the same validation. Source of the flag set:
// PyTorch torch/distributed/run.py (1.13 and 2.x).
#include <csignal>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "launcher/watch/watch_settings.hpp"

namespace ddprun::launcher {

/// How the nodes of a job find each other.
enum class RendezvousMode {
  kSingleNode,  ///< one node, no rendezvous traffic (--standalone, or --nnodes 1 without an endpoint)
  kStatic,      ///< --rdzv-backend static with --nnodes N > 1: fixed node ranks, node 0 serves the store
  kDynamic,     ///< --rdzv-backend c10d or etcd-v3 with an endpoint: elastic rounds (dynamic_rendezvous.py)
};

/// --start-method (torchrun's names). Programs are always started as processes; kForkserver forks every rank
/// from one template start of a program that supports it (common/forkserver.hpp).
enum class StartMethod { kSpawn, kFork, kForkserver };

/// --restart-scope: what a failed rank costs. kGroup: the whole worker group restarts (torchrun's way); kRank: the
/// failed rank alone is replaced while the others keep training (worker/rank_replacement.hpp).
enum class RestartScope { kGroup, kRank };

/// The one bound on --nproc-per-node, and so on local ranks (0 .. kMaxNprocPerNode - 1) wherever a flag names one.
constexpr int kMaxNprocPerNode = 4096;

/// The --rdzv-conf keys ddprun acts on (seconds; torchrun's names and defaults, run.py / dynamic_rendezvous.py).
struct RendezvousConf {
  double joinTimeout = 600;
  double lastCallTimeout = 30;
  double closeTimeout = 30;
  double keepAliveInterval = 5;
  int keepAliveMaxAttempt = 3;
  double readTimeout = 60;
  std::optional<bool> isHost;  ///< unset: inferred from the endpoint host
};

/// What the user said (command line, --config, PET_ variables), validated, and nothing resolved against the
/// machine: that is LaunchPlan's (launch_plan.hpp).
struct LaunchArgs {
  int minNodes = 1, maxNodes = 1;  ///< --nnodes N or MIN:MAX
  std::string nprocPerNode = "1";  ///< N, auto, cpu or gpu (LaunchPlan::nproc is the count)
  int nodeRank = 0;
  bool standalone = false;
  std::string rdzvBackend = "static";
  std::string rdzvEndpoint;
  std::string rdzvId = "none";
  std::map<std::string, std::string> rdzvConf;
  RendezvousMode mode = RendezvousMode::kSingleNode;
  std::string rdzvHost;  ///< endpoint host (dynamic) or --master-addr (static)
  int rdzvPort = 0;      ///< endpoint port (default 29400 for c10d, 2379 for etcd-v3)
  RendezvousConf rdzv;
  int maxRestarts = 0;
  double monitorInterval = 0.1;  ///< seconds; exits are seen at once (SIGCHLD), this paces other checks
  double stopTimeout = 30.0;     ///< seconds between SIGTERM and SIGKILL when stopping workers (--shutdown-timeout)
  /// --signals-to-handle: ddprun's stop signals in this list are forwarded and stop the job; other listed signals
  /// (SIGUSR1, SIGUSR2: Slurm's warnings) are forwarded while the job goes on; an unlisted one ends ddprun.
  std::vector<int> signalsToHandle{SIGTERM, SIGINT, SIGHUP, SIGQUIT};
  std::string numaBinding;        ///< --numa-binding: node, socket, exclusive or core-complex; "" none
  bool virtualLocalRank = false;  ///< --virtual-local-rank: LOCAL_RANK 0 and one visible GPU per worker
  std::vector<std::string> duplicateStdoutFilters;  ///< --duplicate-stdout-filters (substrings)
  std::vector<std::string> duplicateStderrFilters;  ///< --duplicate-stderr-filters
  std::string eventLogHandler = "null";             ///< --event-log-handler: null or console
  bool masterPortGiven = false;                     ///< --master-port was given (else a single node picks a free port)
  std::string masterAddr = "127.0.0.1";
  int masterPort = 29500;
  std::string localAddr;
  std::string role = "default";
  std::string logDir;            ///< empty: a fresh temp dir
  std::map<int, int> redirects;  ///< local rank -> mask (1 stdout, 2 stderr); key -1 = all ranks
  std::map<int, int> tee;
  std::vector<int> localRanksFilter;  ///< empty: all
  bool useAgentStore = true;          ///< false (--no-agent-store): rank 0's worker hosts the c10d store
  bool noPython = false;
  bool module = false;
  bool runPath = false;
  HangSettings hang;                     ///< --hang-timeout, --hang-min-timeout, --output-timeout
  StragglerSettings straggler;           ///< --straggler-factor, --straggler-window
  std::string watchRecord;               ///< --watch-record: the watch's evidence trace; "" none
  int maxNoProgressRestarts = 3;         ///< --max-no-progress-restarts (0: never give up for that)
  int statusPort = -1;                   ///< --status-port; -1: no status page, 0: a free port
  std::string statusHost = "127.0.0.1";  ///< --status-host
  std::string metricsTextfile;           ///< --metrics-textfile: the final metrics for node_exporter; "" none
  std::string metricsPush;               ///< --metrics-push: the Pushgateway's URL; "" none
  StartMethod startMethod = StartMethod::kSpawn;
  RestartScope restartScope = RestartScope::kGroup;  ///< --restart-scope
  bool allowTerminal = true;  ///< false (--no-tty): pipes even when ddprun's console is a terminal
  std::string program;
  std::vector<std::string> programArgs;
};

/// Why parsing stopped without a config: help was printed (exit 0) or a flag was wrong (exit 2, with
/// one line on stderr naming the flag).
struct ParseOutcome {
  std::optional<LaunchArgs> config;
  int exitCode = 0;
};

/// Parses argv. Never throws for user errors: they come back as exit code 2.
ParseOutcome parseLaunchArgs(int argc, char** argv);

/// Parses --rdzv-conf's known keys into `conf`; throws ConfigError naming an unknown key or a bad value.
RendezvousConf parseRendezvousConf(const std::map<std::string, std::string>& raw);

/// Splits "host[:port]"; `defaultPort` when the port is missing; port 0 (a free one) only when `allowFreePort`.
/// Throws ConfigError naming `flag`.
std::pair<std::string, int> parseEndpoint(const std::string& text, int defaultPort, const std::string& flag,
                                          bool allowFreePort = false);

/// Parses a --redirects/--tee value: "3" (all ranks) or "0:1,1:2" (per local rank). Throws ConfigError.
std::map<int, int> parseStdMask(const std::string& text, const std::string& flag);

/// Rewrites argparse-style unambiguous prefixes of ddprun's long options ("--nproc 2", "--max_re=3") to
/// their full names, up to the program. Throws ConfigError for an ambiguous prefix, naming the candidates.
std::vector<std::string> expandOptionPrefixes(const std::vector<std::string>& args);

}  // namespace ddprun::launcher
