#pragma once
// ddprun's command line: torchrun's flags in both spellings (--nproc-per-node and --nproc_per_node), an
// optional --config FILE.json with the same option names (flags override it), then the program and its
// arguments. Source of the flag set: PyTorch torch/distributed/run.py (1.13 and 2.x).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ddprun::launcher {

/// Everything a launch needs, validated.
struct LaunchConfig {
  int minNodes = 1, maxNodes = 1;   ///< --nnodes N or MIN:MAX
  std::string nprocPerNode = "1";   ///< N, auto, cpu or gpu (resolved by resolveNprocPerNode)
  int nproc = 1;                    ///< resolved local world size
  int nodeRank = 0;
  bool standalone = false;
  std::string rdzvBackend = "static";
  std::string rdzvEndpoint;
  std::string rdzvId = "none";
  std::map<std::string, std::string> rdzvConf;
  int maxRestarts = 0;
  double monitorInterval = 0.1;     ///< seconds; exits are seen at once (SIGCHLD), this paces other checks
  double stopTimeout = 30.0;        ///< seconds between SIGTERM and SIGKILL when stopping workers
  std::string masterAddr = "127.0.0.1";
  int masterPort = 29500;
  std::string localAddr;
  std::string role = "default";
  std::string logDir;               ///< empty: a fresh temp dir
  std::map<int, int> redirects;     ///< local rank -> mask (1 stdout, 2 stderr); key -1 = all ranks
  std::map<int, int> tee;
  std::vector<int> localRanksFilter;  ///< empty: all
  bool useAgentStore = true;        ///< false (--no-agent-store): rank 0's worker hosts the c10d store
  bool noPython = false;
  bool module = false;
  bool runPath = false;
  std::string program;
  std::vector<std::string> programArgs;
};

/// Why parsing stopped without a config: help was printed (exit 0) or a flag was wrong (exit 2, with
/// one line on stderr naming the flag).
struct ParseOutcome {
  std::optional<LaunchConfig> config;
  int exitCode = 0;
};

/// Parses argv. Never throws for user errors: they come back as exit code 2.
ParseOutcome parseLaunchArgs(int argc, char** argv);

/// Parses a --redirects/--tee value: "3" (all ranks) or "0:1,1:2" (per local rank). Throws ConfigError.
std::map<int, int> parseStdMask(const std::string& text, const std::string& flag);

/// The mask for `localRank` from a parsed --redirects/--tee map.
int maskFor(const std::map<int, int>& masks, int localRank);

}  // namespace ddprun::launcher
