#include "worker/flag_checks.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "common/append_file.hpp"
#include "common/error.hpp"

namespace ddprun::worker {
namespace fs = std::filesystem;
namespace {

void checkRankFlag(const char* flag, int64_t rank, const DistEnv& env, const char* what) {
  if (rank >= env.worldSize) {
    throw FlagError(std::string(flag) + " " + std::to_string(rank) + " " + what + ": WORLD_SIZE is " +
                    std::to_string(env.worldSize));
  }
}

void checkCheckpointDir(const std::string& dir, bool writer) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) {
    throw FlagError("--checkpoint-dir " + dir + ": exists and is not a directory");
  }
  if (writer) {
    fs::create_directories(dir, ec);
    if (ec) throw FlagError("--checkpoint-dir " + dir + ": cannot create it: " + ec.message());
  }
  if (!fs::exists(dir, ec)) return;  // a reader before the writer made it: nothing to resume from yet
  const int mode = writer ? (R_OK | W_OK | X_OK) : (R_OK | X_OK);
  if (::access(dir.c_str(), mode) != 0) {
    throw FlagError("--checkpoint-dir " + dir + ": cannot " + (writer ? "write to" : "read") +
                    " it: " + std::strerror(errno));
  }
}

void checkMetricsFile(const std::string& path) {
  try {
    ::close(openForAppend(path));  // as MetricsLog will: never blocking, no other user's link followed
  } catch (const IoError& e) {
    throw FlagError(std::string("--metrics-file ") + e.what());
  }
}

}  // namespace

void checkFlagsAgainstEnvironment(const WorkerOptions& options, const DistEnv& env) {
  if (options.failAtStep >= 0) checkRankFlag("--fail-rank", options.failRank, env, "can never fail");
  if (options.slowRank >= 0) {
    checkRankFlag("--slow-rank", options.slowRank, env, "does not exist");
    if (options.slowStepMs <= 0) throw FlagError("--slow-rank needs a positive --slow-step-ms");
  }
  if (!options.checkpointDir.empty()) checkCheckpointDir(options.checkpointDir, env.rank == 0);
  if (!options.metricsFile.empty() && env.rank == 0) checkMetricsFile(options.metricsFile);
}

}  // namespace ddprun::worker
