// The cost of one look at a rank's process tree in /proc (launcher/watch/evidence/process_activity.hpp), as ddprun
// takes it twice a second for each rank that has gone quiet. Usage: activity_bench PID...
// (tools/bench/hang_detection.sh passes the ranks of a running job).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "launcher/watch/evidence/process_activity.hpp"

int main(int argc, char** argv) {
  std::vector<pid_t> pids;
  for (int i = 1; i < argc; ++i) pids.push_back(static_cast<pid_t>(std::atoi(argv[i])));
  if (pids.empty()) {
    std::fprintf(stderr, "usage: activity_bench PID...\n");
    return 2;
  }
  constexpr int kRounds = 200;
  int processes = 0;
  auto start = std::chrono::steady_clock::now();
  for (int round = 0; round < kRounds; ++round) {
    for (pid_t pid : pids) processes += ddprun::launcher::readProcessTree(pid).processes;
  }
  const double full = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  // As ddprun samples: the tree's members found once per 2 s, only their counters read in between (every 0.5 s);
  // the bytes through its TCP sockets only for a rank that waits in a collective.
  const auto sampled = [&](bool sockets) {
    ddprun::launcher::ProcessTreeSampler sampler;
    const auto begin = std::chrono::steady_clock::now();
    for (int round = 0; round < kRounds; ++round) {
      const auto now = begin + std::chrono::milliseconds(500 * round);
      for (pid_t pid : pids) sampler.sample(pid, now, sockets);
    }
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - begin).count();
  };
  const double cached = sampled(false);
  const double withSockets = sampled(true);
  const double per = static_cast<double>(kRounds) * static_cast<double>(pids.size()) * 1000;
  std::printf(
      "one /proc look at a rank's process tree: %.1f us finding its processes, %.1f us as ddprun samples "
      "(members found every 2 s), %.1f us with its sockets' bytes (a rank in a collective) (%d ranks, %.1f processes "
      "each, %d rounds)\n",
      full / per, cached / per, withSockets / per, static_cast<int>(pids.size()),
      static_cast<double>(processes) / kRounds / static_cast<double>(pids.size()), kRounds);
  return 0;
}
