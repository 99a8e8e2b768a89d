#include "common/shm_names.hpp"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace ddprun {
namespace {

constexpr size_t kMaxEscapedRunId = 64;

bool keptAsIs(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
}

/// FNV-1a, 64 bits (a stable hash for run ids too long for a file name).
uint64_t fnv1a(const std::string& text) {
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

std::string escapeRunId(const std::string& runId) {
  std::string out;
  char hex[24];
  for (unsigned char c : runId) {
    if (keptAsIs(c)) {
      out += static_cast<char>(c);
    } else {
      std::snprintf(hex, sizeof hex, "%%%02X", c);
      out += hex;
    }
  }
  if (out.size() <= kMaxEscapedRunId) return out;
  std::snprintf(hex, sizeof hex, "%%%%%016llx", static_cast<unsigned long long>(fnv1a(runId)));
  return hex;
}

}  // namespace

std::string shmRunPrefix(const std::string& runId) { return "ddprun-shm-" + escapeRunId(runId) + "-"; }

std::string shmSegmentName(const std::string& runId, int attempt, const std::string& randomHex) {
  return shmRunPrefix(runId) + "a" + std::to_string(attempt) + "-" + randomHex;
}

ShmCleanup removeShmSegments(const std::string& runId, std::optional<int> attempt, const std::string& dir) {
  ShmCleanup result;
  std::string prefix = shmRunPrefix(runId);
  if (attempt) prefix += "a" + std::to_string(*attempt) + "-";
  DIR* listing = ::opendir(dir.c_str());
  if (listing == nullptr) {
    result.errors.push_back("cannot list " + dir + ": " + std::strerror(errno));
    return result;
  }
  while (const dirent* entry = ::readdir(listing)) {
    const std::string name = entry->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string path = dir + "/" + name;
    struct stat info {};
    if (::lstat(path.c_str(), &info) != 0 || !S_ISREG(info.st_mode) || info.st_uid != ::geteuid()) continue;
    if (::unlink(path.c_str()) == 0) {
      result.removed.push_back(name);
    } else if (errno != ENOENT) {  // gone meanwhile: its worker unlinked it
      result.errors.push_back("cannot remove " + path + ": " + std::strerror(errno));
    }
  }
  ::closedir(listing);
  return result;
}

}  // namespace ddprun
