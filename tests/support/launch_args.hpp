#pragma once
// Parses a ddprun command line as main() does, for tests of the launcher's configuration.
#include <string>
#include <vector>

#include "launcher/config/launch_config.hpp"

namespace ddprun::launcher {

/// `args` without the program name ("ddprun" is put first).
inline ParseOutcome parse(std::vector<std::string> args) {
  args.insert(args.begin(), "ddprun");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return parseLaunchArgs(static_cast<int>(argv.size()), argv.data());
}

}  // namespace ddprun::launcher
