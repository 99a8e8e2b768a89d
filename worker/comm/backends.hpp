#pragma once
// The worker's collective backends, declared once: the --backend names, what each one needs (tensors on the
// CPU or a GPU, a CUDA or Gloo build) and its one-line help. Flag parsing, placement and the communicator
// factory all read this table, so adding a backend is one row here plus its factory (make_communicator.cpp).
// LibTorch-free.
#include <string>
#include <vector>

namespace ddprun::worker {

/// --backend values.
enum class BackendKind { kAuto, kGloo, kNccl, kShm };

/// One row of the backend table.
struct BackendInfo {
  BackendKind kind;
  const char* name;     ///< the --backend spelling
  bool cpuTensors;      ///< reduces tensors that live on the CPU
  bool cudaTensors;     ///< reduces tensors that live on a GPU
  bool sharesGpu;       ///< two ranks of one group may use one GPU (NCCL cannot)
  bool needsCudaBuild;  ///< only in a DDPRUN_WITH_CUDA build
  bool needsGlooBuild;  ///< only with Gloo's headers (DDPRUN_WITH_GLOO)
  const char* help;     ///< one phrase for --help
};

/// Every --backend value, "auto" first.
const std::vector<BackendInfo>& backendTable();

/// The row of `kind`.
const BackendInfo& backendInfo(BackendKind kind);

/// The --backend spellings, in table order (for CLI11's IsMember).
std::vector<std::string> backendNames();

/// "auto (…), gloo (…), …": the --backend help text, from the table.
std::string backendHelp();

/// Parses a --backend value; throws FlagError listing the valid names otherwise.
BackendKind parseBackendKind(const std::string& name);

/// The --backend spelling of `kind`.
std::string backendName(BackendKind kind);

}  // namespace ddprun::worker
