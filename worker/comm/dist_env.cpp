#include "worker/comm/dist_env.hpp"

#include <limits>

#include "common/env.hpp"
#include "common/error.hpp"

namespace ddprun::worker {

namespace {
/// An integer variable as torch reads it into a C int: a value past int's range is an error naming it, not
/// truncated (WORLD_SIZE=99999999999 became 1215752191).
int intIn(const char* name, int fallback) {
  const int64_t value = getEnvInt(name, fallback);
  if (value < std::numeric_limits<int>::min() || value > std::numeric_limits<int>::max()) {
    throw ConfigError(std::string(name) + "=" + std::to_string(value) + " is outside the range of an int");
  }
  return static_cast<int>(value);
}
}  // namespace

DistEnv DistEnv::fromEnvironment() {
  DistEnv env;
  env.rank = intIn("RANK", 0);
  env.worldSize = intIn("WORLD_SIZE", 1);
  env.localRank = intIn("LOCAL_RANK", 0);
  env.localWorldSize = intIn("LOCAL_WORLD_SIZE", 1);
  env.groupRank = intIn("GROUP_RANK", -1);
  env.restartCount = intIn("TORCHELASTIC_RESTART_COUNT", 0);
  env.useAgentStore = getEnvBool("TORCHELASTIC_USE_AGENT_STORE", false);
  env.errorFile = getEnv("TORCHELASTIC_ERROR_FILE").value_or("");
  env.runId = getEnv("TORCHELASTIC_RUN_ID").value_or("none");
  env.replaceableRanks = getEnv("DDPRUN_RESTART_SCOPE").value_or("group") == "rank";
  env.commGeneration = intIn("DDPRUN_COMM_GENERATION", 0);
  if (env.commGeneration < 0) throw ConfigError("DDPRUN_COMM_GENERATION must not be negative");
  if (env.worldSize < 1) throw ConfigError("WORLD_SIZE must be at least 1, got " + std::to_string(env.worldSize));
  if (env.rank < 0 || env.rank >= env.worldSize) {
    throw ConfigError("RANK " + std::to_string(env.rank) +
                      " is outside [0, WORLD_SIZE=" + std::to_string(env.worldSize) + ")");
  }
  if (env.localRank < 0) throw ConfigError("LOCAL_RANK must not be negative");
  if (env.distributed()) {
    auto addr = getEnv("MASTER_ADDR");
    if (!addr) throw ConfigError("MASTER_ADDR is not set but WORLD_SIZE is " + std::to_string(env.worldSize));
    if (!getEnv("MASTER_PORT"))
      throw ConfigError("MASTER_PORT is not set but WORLD_SIZE is " + std::to_string(env.worldSize));
    env.masterAddr = *addr;
  }
  env.masterPort = intIn("MASTER_PORT", 29500);
  if (env.masterPort < 0 || env.masterPort > 65535) {
    throw ConfigError("MASTER_PORT " + std::to_string(env.masterPort) + " is not a TCP port");
  }
  return env;
}

}  // namespace ddprun::worker
