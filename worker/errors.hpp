#pragma once
// The worker's error for a flag that cannot work; its own header so that the communication floor
// (worker/comm/) can throw it without depending on the whole command line (worker/options.hpp).
#include "common/error.hpp"

namespace ddprun::worker {

/// A flag that cannot work here (a value that contradicts the environment, the build or the file system);
/// the worker exits 2 for it, as for a malformed flag.
class FlagError : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

}  // namespace ddprun::worker
