#include "worker/comm/backends.hpp"

#include "worker/errors.hpp"

namespace ddprun::worker {

const std::vector<BackendInfo>& backendTable() {
  static const std::vector<BackendInfo> table{
      {BackendKind::kAuto, "auto", true, true, true, false, false,
       "NCCL on CUDA; on the CPU shm among the ranks of one host, Gloo between hosts"},
      {BackendKind::kGloo, "gloo", true, true, true, false, true, "Gloo over TCP (CPU, or CUDA through host copies)"},
      {BackendKind::kNccl, "nccl", false, true, false, true, false, "NCCL (CUDA, one GPU per rank)"},
      {BackendKind::kShm, "shm", true, false, false, false, false,
       "shared memory among the ranks of one host (CPU); with several hosts, Gloo between one leader per host"},
  };
  return table;
}

const BackendInfo& backendInfo(BackendKind kind) {
  for (const auto& row : backendTable()) {
    if (row.kind == kind) return row;
  }
  return backendTable().front();  // not reached: every kind has a row
}

std::vector<std::string> backendNames() {
  std::vector<std::string> names;
  for (const auto& row : backendTable()) names.emplace_back(row.name);
  return names;
}

std::string backendHelp() {
  std::string help;
  for (const auto& row : backendTable()) {
    if (!help.empty()) help += "; ";
    help += std::string(row.name) + ": " + row.help;
  }
  return help;
}

BackendKind parseBackendKind(const std::string& name) {
  for (const auto& row : backendTable()) {
    if (name == row.name) return row.kind;
  }
  std::string valid;
  for (const auto& row : backendTable()) valid += (valid.empty() ? "" : ", ") + std::string(row.name);
  throw FlagError("--backend: expected one of " + valid + ", got '" + name + "'");
}

std::string backendName(BackendKind kind) { return backendInfo(kind).name; }

}  // namespace ddprun::worker
