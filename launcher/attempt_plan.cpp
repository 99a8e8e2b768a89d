#include "launcher/attempt_plan.hpp"

#include <spdlog/spdlog.h>

#include <filesystem>

#include "common/env.hpp"

namespace ddprun::launcher {
namespace {

FlightRecorderFiles flightRecorderOf(const std::string& rankDir, int rank) {
  return flightRecorderFiles(rankDir, rank, [](const char* name) { return getEnv(name); });
}

WorkerAssignment assignmentOf(const rendezvous::RoundAssignment& round, int nproc, int local) {
  WorkerAssignment assignment;
  assignment.localRank = local;
  assignment.groupRank = round.groupRank;
  assignment.globalRank = round.rankOffset + local;
  assignment.roleRank = assignment.globalRank;
  assignment.localWorldSize = nproc;
  assignment.worldSize = round.worldSize;
  assignment.roleWorldSize = round.worldSize;
  assignment.groupWorldSize = round.groupWorldSize;
  return assignment;
}

/// A replacement's files beside the replaced rank's: "<file>.generation_<g>".
void suffixFiles(WorkerGroup::Member& member, int generation) {
  const std::string suffix = ".generation_" + std::to_string(generation);
  member.errorFile += suffix;
  member.launch.env["TORCHELASTIC_ERROR_FILE"] = member.errorFile;
  member.launch.env["DDPRUN_COMM_GENERATION"] = std::to_string(generation);
  if (!member.launch.output.stdoutFile.empty()) member.launch.output.stdoutFile += suffix;
  if (!member.launch.output.stderrFile.empty()) member.launch.output.stderrFile += suffix;
}

}  // namespace

AttemptPlan::AttemptPlan(const LaunchPlan& config, WorkerSpec spec, std::string runDir, std::vector<NumaBinding> numa)
    : config_(config), spec_(std::move(spec)), runDir_(std::move(runDir)), numa_(std::move(numa)) {}

WorkerLogPaths AttemptPlan::logPaths(int attempt, int local) const {
  return workerLogPaths(runDir_, attempt, local, {config_.redirects, config_.tee, config_.localRanksFilter});
}

WorkerGroup::Member AttemptPlan::member(const rendezvous::RoundAssignment& round, AttemptId id, int local) const {
  const WorkerAssignment assignment = assignmentOf(round, config_.nproc, local);
  const WorkerLogPaths paths = logPaths(id.attempt, local);
  const AttemptInfo info{id.attempt,
                         round.masterAddr,
                         round.masterPort,
                         config_.useAgentStore,
                         paths.errorFile,
                         paths.progressFile,
                         flightRecorderOf(paths.dir, assignment.globalRank)};
  WorkerGroup::Member member;
  member.localRank = local;
  member.globalRank = assignment.globalRank;
  member.errorFile = paths.errorFile;
  WorkerLaunch& launch = member.launch;
  launch.command = spec_.command;
  launch.env = workerEnvironment(spec_, assignment, info);
  if (replaceRanks_) launch.env["DDPRUN_RESTART_SCOPE"] = "rank";
  launch.output.prefix = linePrefix(spec_.prefixTemplate, spec_.role, assignment.globalRank, local);
  launch.output.stdoutFile = paths.stdoutFile;
  launch.output.stderrFile = paths.stderrFile;
  launch.output.stdoutToConsole = paths.stdoutToConsole;
  launch.output.stderrToConsole = paths.stderrToConsole;
  launch.output.allowTerminal = spec_.allowTerminal;
  launch.inheritStdin = local == 0;  // pdb and input() on local rank 0, as under torchrun
  launch.source = assignment.globalRank;
  launch.forkServer = forkServer_;
  const std::string attemptDir = std::filesystem::path(paths.dir).parent_path().string();
  launch.output.stdoutFilters = config_.duplicateStdoutFilters;
  launch.output.stderrFilters = config_.duplicateStderrFilters;
  launch.output.stdoutFilteredFile = attemptDir + "/filtered_stdout.log";
  launch.output.stderrFilteredFile = attemptDir + "/filtered_stderr.log";
  if (!numa_.empty()) {
    launch.cpus = numa_[static_cast<size_t>(local)].cpus;
    launch.memoryNode = numa_[static_cast<size_t>(local)].memoryNode;
  }
  if (id.generation > 0) suffixFiles(member, id.generation);
  return member;
}

std::vector<WorkerGroup::Member> AttemptPlan::members(const rendezvous::RoundAssignment& round, AttemptId id) const {
  std::vector<WorkerGroup::Member> all;
  for (int local = 0; local < config_.nproc; ++local) all.push_back(member(round, id, local));
  return all;
}

std::vector<WorkerWatch::RankFiles> AttemptPlan::rankFiles(const rendezvous::RoundAssignment& round,
                                                           int attempt) const {
  std::vector<WorkerWatch::RankFiles> files;
  for (int local = 0; local < config_.nproc; ++local) {
    const auto paths = workerLogPaths(runDir_, attempt, local, {});
    files.push_back({paths.progressFile, paths.stacksFile, flightRecorderOf(paths.dir, round.rankOffset + local)});
  }
  return files;
}

std::vector<NumaBinding> planNuma(const LaunchPlan& config) {
  if (config.numaBinding.empty()) return {};
  auto plan = planNumaBinding(config.numaBinding, restrictToCpus(readNumaTopology(), allowedCpus()), config.nproc);
  std::string text;
  for (size_t local = 0; local < plan.size(); ++local) {
    text += (text.empty() ? "" : "; ") + std::string("local rank ") + std::to_string(local) + " on CPUs " +
            formatCpuList(plan[local].cpus) + ", memory of node " + std::to_string(plan[local].memoryNode);
  }
  spdlog::info("--numa-binding {}: {}", config.numaBinding, text);
  if (config.numaBinding == "exclusive") {
    if (const auto shared = sharedCpus(plan); !shared.empty()) {
      spdlog::warn("--numa-binding exclusive: {} ranks, too few CPUs for one each: CPUs {} are shared by several ranks",
                   plan.size(), formatCpuList(shared));
    }
  }
  return plan;
}

}  // namespace ddprun::launcher
