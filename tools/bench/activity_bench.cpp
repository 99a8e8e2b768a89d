// The cost of one look at a rank's process tree in /proc (launcher/watch/process_activity.hpp), as ddprun takes
// it twice a second for each rank that has gone quiet. Usage: activity_bench PID... (tools/bench/hang_detection.sh
// passes the ranks of a running job).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "launcher/watch/process_activity.hpp"

int main(int argc, char** argv) {
  std::vector<pid_t> pids;
  for (int i = 1; i < argc; ++i) pids.push_back(static_cast<pid_t>(std::atoi(argv[i])));
  if (pids.empty()) {
    std::fprintf(stderr, "usage: activity_bench PID...\n");
    return 2;
  }
  constexpr int kRounds = 2000;
  int processes = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int round = 0; round < kRounds; ++round) {
    for (pid_t pid : pids) processes += ddprun::launcher::readProcessTree(pid).processes;
  }
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  std::printf("one /proc sample of a rank's tree: %.1f us (%d ranks, %.1f processes each, %d rounds)\n",
              ns / kRounds / static_cast<double>(pids.size()) / 1000, static_cast<int>(pids.size()),
              static_cast<double>(processes) / kRounds / static_cast<double>(pids.size()), kRounds);
  return 0;
}
