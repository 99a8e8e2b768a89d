#pragma once
// Test helper for runs of the real worker under ddprun: its command line on the carried MNIST sample, and how
// far apart the final models of two runs are. Needs DDPRUN_WORKER_BIN and DDPRUN_SOURCE_DIR.
#include <string>
#include <vector>

#include "support/model_compare.hpp"
#include "worker/checkpoint.hpp"
#include "worker/models.hpp"

namespace ddprun::test {

/// `worker --data-dir <carried MNIST> --log-every 1000 --backend BACKEND --checkpoint-dir DIR` plus `extra`.
/// Gloo by default: its ring adds the ranks' gradients in one order whatever the nodes' shape, so runs of one world
/// size spread over different nodes end bit for bit alike (shm, --backend auto's choice on the CPU, sums each host
/// first: equal within 1e-5, not bit for bit, for more than two ranks).
inline std::vector<std::string> workerArgs(const std::string& checkpointDir, std::vector<std::string> extra = {},
                                           const std::string& backend = "gloo") {
  std::vector<std::string> args{
      DDPRUN_WORKER_BIN,  "--data-dir", DDPRUN_SOURCE_DIR "/data/mnist", "--log-every", "1000", "--backend", backend,
      "--checkpoint-dir", checkpointDir};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

/// `flags` followed by `command`.
inline std::vector<std::string> concat(std::vector<std::string> flags, const std::vector<std::string>& command) {
  flags.insert(flags.end(), command.begin(), command.end());
  return flags;
}

/// max |a - b| over the parameters of the newest MLP checkpoints in two directories.
inline double maxAbsDiffOfFinalModels(const std::string& dirA, const std::string& dirB) {
  auto a = worker::makeModel("mlp"), b = worker::makeModel("mlp");
  worker::loadModelFromCheckpoint(worker::listCheckpoints(dirA).at(0), *a);
  worker::loadModelFromCheckpoint(worker::listCheckpoints(dirB).at(0), *b);
  return maxAbsParameterDiff(*a, *b);
}

}  // namespace ddprun::test
