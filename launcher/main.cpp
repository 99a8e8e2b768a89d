// ddprun: torchrun-compatible launcher. Parses the command line, resolves it into a launch plan, and hands
// over to the agent; every error ends in one clear line and a conventional exit code.
#include <malloc.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <optional>

#include "common/env.hpp"
#include "common/error.hpp"
#include "common/forkserver.hpp"
#include "common/log_level.hpp"
#include "common/spare_rank.hpp"
#include "launcher/agent.hpp"
#include "launcher/config/launch_config.hpp"
#include "launcher/config/launch_plan.hpp"
#include "launcher/process/console_writer.hpp"
#include "launcher/process/logging.hpp"
#include "launcher/process/orphan_guard.hpp"

namespace {

/// DDPRUN_LOG_LEVEL, else torchrun's LOGLEVEL (Python's names: DEBUG, INFO, WARNING, ERROR, CRITICAL).
void applyLogLevel() {
  using namespace ddprun;
  std::string variable = "DDPRUN_LOG_LEVEL";
  auto text = getEnv(variable);
  if (!text) {
    variable = "LOGLEVEL";
    text = getEnv(variable);
  }
  if (!text) return;
  if (auto level = parseLogLevel(*text)) {
    spdlog::set_level(*level);
  } else {
    spdlog::warn("{}={}: not a log level (debug, info, warning, error, critical); keeping info", variable, *text);
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ddprun;
  using namespace ddprun::launcher;
  // ddprun sets these markers only in the processes it means them for (the forkserver template, a spare): one left in
  // the environment it was started with (a shell that exported a rank's variables) would make every rank a spare
  // waiting on a claim that never comes.
  ::unsetenv(kSpareRankEnv);
  ::unsetenv(kForkServerFdEnv);
  // One malloc arena for all of ddprun's threads: each further arena is a 64 MiB reservation set up (mmap, munmap,
  // mprotect, page tables) by the first malloc of each new thread, measurable in an agent's start-up; ddprun's few
  // threads allocate little, and each thread's tcache keeps them off the lock. A user's own MALLOC_ARENA_MAX or
  // glibc.malloc.arena_max tunable wins.
  if (!getEnv("MALLOC_ARENA_MAX") && getEnv("GLIBC_TUNABLES").value_or("").find("arena_max") == std::string::npos) {
    ::mallopt(M_ARENA_MAX, 1);
  }
  // First: where the guardian is a fork (no ddprun-orphan-guard beside ddprun), the fork costs per page that exists
  // (orphan_guard.cpp), here few do yet, and no thread runs. Otherwise nothing starts until the first worker does.
  OrphanGuard guard;
  auto parsed = parseLaunchArgs(argc, argv);
  if (!parsed.config) return parsed.exitCode;
  // ddprun's own lines go to stderr, as torchrun's do: stdout carries the workers' output alone. Neither waits for
  // its reader: a write that could block goes to a thread of its own (console_writer.hpp), so a reader that stops
  // reading never holds up supervision.
  installConsoleLogger();
  // A closed stdout (ddprun … | head) must not kill the supervisor; writes just fail.
  ::signal(SIGPIPE, SIG_IGN);
  applyLogLevel();
  std::optional<LaunchPlan> plan;
  try {
    plan = resolveLaunchPlan(std::move(*parsed.config));
  } catch (const ConfigError& e) {
    consoleErr().write(ConsoleWriter::kSelf, std::string("ddprun: ") + e.what() + "\n", false);
    flushConsoles(std::chrono::seconds(1));
    return 2;
  }
  int exitCode = 1;
  try {
    Agent agent(std::move(*plan), guard);
    exitCode = agent.run();
  } catch (const ConfigError& e) {
    // Found only once the agent runs (e.g. --local-addr that is no address of this machine): still a flag.
    spdlog::error("{}", e.what());
    exitCode = 2;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    exitCode = 1;
  }
  // What is still queued for the console gets a moment; a reader that never reads does not hold ddprun.
  flushConsoles(std::chrono::seconds(1));
  return exitCode;
}
