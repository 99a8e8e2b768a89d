// What a rank's error file costs the agent: the time describeFailure and the failure summary take on the agent's loop
// and the process's peak resident memory, for each hostile or huge file (tools/bench/error_file_bench.sh).
// Usage: error_file_bench FILE... ; one line per file: "<file> <ms> <peak RSS MiB> <summary bytes>", each in a child.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "launcher/history/failure_summary.hpp"

int main(int argc, char** argv) {
  using namespace ddprun::launcher;
  for (int i = 1; i < argc; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      const auto start = std::chrono::steady_clock::now();
      const WorkerFailure f = describeFailure(1, 1, 100, {1, 0, std::chrono::system_clock::now()}, argv[i]);
      const std::string summary = formatFailureSummary("bench", "default", {f}, "host");
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      rusage usage{};
      ::getrusage(RUSAGE_SELF, &usage);
      std::printf("%s %.1f %.1f %zu\n", argv[i], ms, usage.ru_maxrss / 1024.0, summary.size());
      std::fflush(stdout);
      ::_exit(0);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
  }
  return 0;
}
