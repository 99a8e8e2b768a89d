#pragma once
// Training checkpoints: model, optimizer, progress (epoch, step), RNG and sampler state, in LibTorch's
// archive format, wrapped with a CRC-32 of those bytes (LibTorch's reader checks only the zip's structure,
// so bytes changed inside a tensor would otherwise load silently). Written by rank 0 only, atomically (temp
// file, fsync, rename), as <dir>/checkpoint-<global step, 9 digits>.pt; the two newest are kept.
#include <torch/torch.h>

#include <optional>
#include <string>

#include "common/error.hpp"

namespace ddprun::worker {

/// Where training stands, enough to continue exactly where it stopped.
struct TrainingProgress {
  int64_t epoch = 0;        ///< epoch to run next (0-based)
  int64_t stepInEpoch = 0;  ///< optimizer steps of that epoch already done
  int64_t globalStep = 0;   ///< optimizer steps done in total
  int64_t worldSize = 1;    ///< world size that produced stepInEpoch
  int64_t batchSize = 0;    ///< per-rank batch size that produced stepInEpoch
  int64_t samplerSeed = 0;  ///< DistributedSampler seed (the shuffle of epoch e uses seed + e)
};

/// A readable checkpoint that does not fit the model being trained (another --model, say).
class CheckpointMismatch : public DataError {
 public:
  using DataError::DataError;
};

/// Saves model + optimizer + progress + the default CPU generator's state to `dir` atomically (serialised
/// in memory first, so a full disk fails cleanly with IoError and leaves no temp file), then deletes the
/// checkpoints older than the newest two at or below this step. Returns the path written. Throws IoError.
std::string saveCheckpoint(const std::string& dir, torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                           const TrainingProgress& progress);

/// Loads the checkpoint at `path` into `model` and `optimizer`, restores the CPU generator and returns
/// the progress. Every tensor is mapped to `device` (the parameters' device) on load: the optimizer's
/// state (SGD momentum) must sit beside the parameters, and a file written from cuda:0 must not put
/// rank 1's state on cuda:0. Throws CheckpointMismatch naming the file when it holds another model, and
/// DataError when it is unreadable or corrupt, its checksum included.
TrainingProgress loadCheckpoint(const std::string& path, torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                                const torch::Device& device = torch::kCPU);

/// Loads only the model parameters and buffers from a checkpoint (for evaluation and tests).
void loadModelFromCheckpoint(const std::string& path, torch::nn::Module& model);

/// An entry of a checkpoint directory that is not a usable checkpoint.
struct CheckpointDirEntry {
  std::string name;
  std::string what;             ///< "a directory named like a checkpoint", "a FIFO", …
  std::optional<int64_t> step;  ///< the step its name encodes, when it is named like a checkpoint
  bool blocksWrite = false;     ///< a checkpoint of that step cannot be written over it (a directory)
};

/// What a checkpoint directory holds: its checkpoint files (regular files, or links to them, named
/// checkpoint-<step>.pt), newest first, and every other entry (temp files of interrupted writes aside).
struct CheckpointScan {
  std::vector<std::string> checkpoints;
  std::vector<CheckpointDirEntry> others;
};

/// Scans `dir` without following a link into a loop or blocking on a FIFO; empty when there is no dir.
CheckpointScan scanCheckpointDir(const std::string& dir);

/// The checkpoint files in `dir`, newest (highest global step) first; empty when none or no dir.
std::vector<std::string> listCheckpoints(const std::string& dir);

/// The global step encoded in a checkpoint file name, or nullopt for other names.
std::optional<int64_t> checkpointStep(const std::string& path);

/// Removes temp files that a crash during saveCheckpoint left in `dir`; returns how many.
int removeStaleTempFiles(const std::string& dir);

/// The path of the checkpoint for `globalStep` in `dir`.
std::string checkpointPath(const std::string& dir, int64_t globalStep);

}  // namespace ddprun::worker
