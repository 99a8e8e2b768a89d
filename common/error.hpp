#pragma once
// The project's error tree. Every error names the thing that is wrong (a flag, a file, an environment
// variable, a peer) so the one line a user sees is enough to act on.
#include <stdexcept>
#include <string>

namespace ddprun {

/// Base of every error the project throws on purpose.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A wrong flag, option value or environment variable.
class ConfigError : public Error {
 public:
  using Error::Error;
};

/// A missing, truncated or corrupt input file (data set, checkpoint, config).
class DataError : public Error {
 public:
  using Error::Error;
};

/// A failure while writing or reading a file the project owns (checkpoint, error file, metrics).
class IoError : public Error {
 public:
  using Error::Error;
};

/// The first line of an error message: c10 errors append a C++ backtrace after it.
inline std::string firstLine(const std::string& message) { return message.substr(0, message.find('\n')); }

}  // namespace ddprun
