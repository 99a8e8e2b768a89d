#pragma once
// The worker's command line.
#include <cstdint>
#include <string>

#include "worker/errors.hpp"

namespace ddprun::worker {

/// --fail-mode values.
enum class FailMode { kExit, kKill, kHang, kStop, kThread };

/// All worker flags with their defaults (see `worker --help`).
struct WorkerOptions {
  std::string dataset = "mnist";  ///< mnist | fashion-mnist
  std::string dataDir;            ///< empty: data/mnist, or Debian's Fashion-MNIST dir
  std::string model = "mlp";      ///< mlp | cnn
  int64_t epochs = 1;
  int64_t batchSize = 64;  ///< per rank
  double lr = 0.05;
  double momentum = 0.9;
  double weightDecay = 0.0;
  int64_t seed = 0;
  bool dropLast = false;
  double bucketCapMb = 25.0;
  bool noOverlap = false;
  std::string backend = "auto";    ///< a name of comm/backends.hpp's table
  std::string device = "auto";     ///< auto | cpu | cuda (cuda:LOCAL_RANK)
  bool amp = false;                ///< bf16 autocast for forward and loss on the training device
  std::string cudaGraph = "auto";  ///< auto | on | off: the step recorded as CUDA graphs (auto: on a CUDA device)
  double timeoutSeconds = 300.0;   ///< store and collective timeout
  int64_t logEvery = 50;           ///< steps between progress lines (rank 0)
  std::string metricsFile;         ///< JSON lines; empty: none
  std::string checkpointDir;       ///< empty: no checkpoints, no resume
  int64_t checkpointEvery = 0;     ///< steps between mid-epoch checkpoints; 0: epoch ends only
  int64_t maxSteps = 0;            ///< stop after this many optimizer steps in total; 0: no limit
  int64_t threads = 0;             ///< intra-op threads; 0: OMP_NUM_THREADS or LibTorch's default
  int64_t failAtStep = -1;         ///< fault injection: global step at which to fail; -1: never
  int64_t failRank = 0;
  int64_t failAttempt = 0;  ///< acts only when TORCHELASTIC_RESTART_COUNT equals this
  FailMode failMode = FailMode::kExit;
  int64_t slowRank = -1;  ///< straggler injection: this rank sleeps slowStepMs per step; -1: none
  double slowStepMs = 0;
};

/// Parses argv with CLI11. Returns nullopt-like false in `ok` and an exit code when the program should
/// stop (help shown, or a bad flag reported on stderr with exit code 2).
struct ParseResult {
  WorkerOptions options;
  bool proceed = true;
  int exitCode = 0;
};
ParseResult parseWorkerOptions(int argc, char** argv);

}  // namespace ddprun::worker
