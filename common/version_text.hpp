#pragma once
// The line --version prints: "<program> <version> (commit <hash>)".
#include <string>

#include "common/version.hpp"

namespace ddprun {

inline std::string versionText(const std::string& program) {
  std::string line = program + " " + kVersion;
  if (*kCommit != '\0') line += std::string(" (commit ") + kCommit + ")";
  return line;
}

}  // namespace ddprun
