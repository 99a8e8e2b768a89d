#pragma once
// What an attempt's workers are: from the round (ranks, world size, store address) and the attempt's number to each
// local rank's launch (command, torchrun's environment, log files, output routing, NUMA binding) and the files the
// watch reads. Pure: no processes, no files written, so a test can check every variable, and a rank replacement can
// ask for one rank instead of all of them.
#include <string>
#include <vector>

#include "launcher/config/launch_plan.hpp"
#include "launcher/log_layout.hpp"
#include "launcher/process/numa_binding.hpp"
#include "launcher/watch/worker_watch.hpp"
#include "launcher/worker_env.hpp"
#include "launcher/worker_group.hpp"
#include "rendezvous/rendezvous_handler.hpp"

namespace ddprun::launcher {

/// Which attempt, and which communicator generation inside it: the one identity passed down to every part.
/// `attempt` is TORCHELASTIC_RESTART_COUNT (a multi-node job uses the round, which every node shares);
/// `generation` counts rank replacements inside the attempt (DDPRUN_COMM_GENERATION, 0 at the attempt's start).
struct AttemptId {
  int attempt = 0;
  int generation = 0;
};

class AttemptPlan {
 public:
  /// `numa`: each local rank's CPUs and memory node (--numa-binding; empty: no binding). `runDir`: the run's log
  /// directory (RunLogDir::path).
  AttemptPlan(const LaunchPlan& config, WorkerSpec spec, std::string runDir, std::vector<NumaBinding> numa);

  /// The forkserver template ranks are forked from (null: started the normal way).
  void useForkServer(ForkTemplate* forkServer) { forkServer_ = forkServer; }
  /// --restart-scope rank in effect: every rank is told (DDPRUN_RESTART_SCOPE=rank).
  void replaceRanks(bool replace) { replaceRanks_ = replace; }

  /// Local rank `local` of attempt `id` in `round`. From generation 1 on (a replacement) its error file and output
  /// files get a ".generation_<g>" suffix, so the replaced rank's files stay as it left them.
  WorkerGroup::Member member(const rendezvous::RoundAssignment& round, AttemptId id, int local) const;
  /// Every local rank of attempt `id`.
  std::vector<WorkerGroup::Member> members(const rendezvous::RoundAssignment& round, AttemptId id) const;
  /// The log paths of local rank `local` (the directories RunLogDir::prepare makes before the start).
  WorkerLogPaths logPaths(int attempt, int local) const;
  /// What the watch reads and writes for each local rank of `attempt`.
  std::vector<WorkerWatch::RankFiles> rankFiles(const rendezvous::RoundAssignment& round, int attempt) const;

  const WorkerSpec& spec() const { return spec_; }
  const std::string& runDir() const { return runDir_; }

 private:
  const LaunchPlan& config_;
  WorkerSpec spec_;
  std::string runDir_;
  std::vector<NumaBinding> numa_;
  ForkTemplate* forkServer_ = nullptr;
  bool replaceRanks_ = false;
};

/// --numa-binding: each local rank's CPUs and memory node within ddprun's own CPU set (sched_getaffinity), logged in
/// one info line; empty without the flag. Throws ConfigError when the machine cannot satisfy it.
std::vector<NumaBinding> planNuma(const LaunchPlan& config);

}  // namespace ddprun::launcher
