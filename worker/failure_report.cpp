#include "worker/failure_report.hpp"

#include <sstream>
#include <vector>

#include "common/error.hpp"

namespace ddprun::worker {
namespace {

bool contains(const std::string& text, const char* part) { return text.find(part) != std::string::npos; }

std::string trim(const std::string& s) {
  const auto begin = s.find_first_not_of(" \t\r");
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(" \t\r") - begin + 1);
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(trim(line));
  return out;
}

/// The first line containing `marker`, or "".
std::string lineWith(const std::string& text, const char* marker) {
  for (const auto& line : lines(text)) {
    if (contains(line, marker)) return line;
  }
  return "";
}

/// NCCL's cause: the text after "Last error:" (same line, or the next non-empty one).
std::string ncclLastError(const std::string& text) {
  const auto all = lines(text);
  for (size_t i = 0; i < all.size(); ++i) {
    const auto at = all[i].find("Last error:");
    if (at == std::string::npos) continue;
    std::string rest = trim(all[i].substr(at + 11));
    for (size_t j = i + 1; rest.empty() && j < all.size(); ++j) rest = all[j];
    return rest;
  }
  return "";
}

/// "NCCL error in: <file>:<line>, unhandled cuda error (…), NCCL version 2.x" → "unhandled cuda error (…), NCCL
/// version 2.x".
std::string withoutSourceLocation(const std::string& line) {
  const auto in = line.find(" in: ");
  if (in == std::string::npos) return line;
  const auto comma = line.find(", ", in);
  if (comma == std::string::npos) return line;
  return line.substr(0, in) + ": " + line.substr(comma + 2);
}

std::string located(const std::string& where) { return where.empty() ? "" : " [" + where + "]"; }

}  // namespace

FailureReport describeFailure(const std::string& typeName, const std::string& what, const std::string& where) {
  if (contains(what, "CUDA out of memory") || typeName == "c10::OutOfMemoryError") {
    return {"CudaOutOfMemory", firstLine(what) + located(where) + "; try a smaller --batch-size"};
  }
  if (contains(what, "Watchdog caught collective operation timeout")) {
    return {"NcclTimeout", lineWith(what, "Watchdog caught") + located(where) +
                               "; a peer rank is dead or stuck (see its log), or --timeout is too short"};
  }
  if (contains(what, "NCCL error") || contains(what, "ncclUnhandledCudaError") || contains(what, "ncclInternalError") ||
      contains(what, "ncclSystemError") || contains(what, "ncclInvalidUsage") || contains(what, "ncclRemoteError")) {
    std::string headline = withoutSourceLocation(lineWith(what, "NCCL"));
    const std::string cause = ncclLastError(what);
    if (!cause.empty()) headline += " (last error: " + cause + ")";
    return {"NcclError", headline + located(where) + "; rerun with NCCL_DEBUG=INFO for details"};
  }
  if (contains(what, "CUDA error") || contains(what, "CUDA driver error") || contains(what, "cuDNN error") ||
      contains(what, "CUBLAS_STATUS_")) {
    std::string headline = lineWith(what, "CUDA error");
    if (headline.empty()) headline = firstLine(what);
    return {"CudaError", headline + located(where) + "; rerun with CUDA_LAUNCH_BLOCKING=1 to find the failing kernel"};
  }
  return {typeName, firstLine(what)};
}

}  // namespace ddprun::worker
