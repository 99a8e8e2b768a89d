#pragma once
// Turns an uncaught error into the one line a user reads (log and torchelastic error file). CUDA and
// NCCL errors arrive as c10::Error (or c10::DistBackendError) whose first line is often generic ("NCCL
// error in: <file>:<line>, unhandled cuda error") and whose cause sits further down ("Last error: …"),
// so they get their own type, the line that names the cause, the rank's device, and what to try next.
// LibTorch-free: the classification works on the error's text and is unit-tested without a GPU.
#include <string>

namespace ddprun::worker {

/// The headline of a failure.
struct FailureReport {
  std::string type;      ///< e.g. "CudaOutOfMemory", "CudaError", "NcclError", "NcclTimeout", or `typeName`
  std::string headline;  ///< one line: cause, where (rank, device) and a hint
};

/// Classifies an error by its C++ type name (as the worker reports it, e.g. "c10::Error") and its full
/// `what()` text. `where` names the rank and device ("rank 1 on cuda:1"; empty when unknown) and is added
/// to GPU errors only. Patterns are PyTorch's own messages: "CUDA out of memory" (c10::OutOfMemoryError),
/// "CUDA error:" / "CUDA driver error" / "cuDNN error" (C10_CUDA_CHECK), "NCCL error" with an optional
/// "Last error:" line (C10D_NCCL_CHECK), and "Watchdog caught collective operation timeout"
/// (ProcessGroupNCCL's watchdog). Anything else keeps `typeName` and the first line of `what`.
FailureReport describeFailure(const std::string& typeName, const std::string& what, const std::string& where);

}  // namespace ddprun::worker
