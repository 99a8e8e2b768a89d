#pragma once
// Typed reads of environment variables (the torchrun contract travels through them).
#include <cstdint>
#include <optional>
#include <string>

namespace ddprun {

/// The value of environment variable `name`, or nullopt when it is unset or empty.
std::optional<std::string> getEnv(const std::string& name);

/// The integer value of `name`, or `fallback` when unset.
/// Throws ConfigError naming the variable when the value is not a whole number.
int64_t getEnvInt(const std::string& name, int64_t fallback);

/// The boolean value of `name` ("1", "true", "True", "yes" / "0", "false", "False", "no"), or `fallback`.
/// torchrun writes Python's bool strings ("True"/"False"); throws ConfigError for anything else.
bool getEnvBool(const std::string& name, bool fallback);

/// Parses `text` as a whole decimal number; throws ConfigError naming `what` on failure.
int64_t parseInt(const std::string& text, const std::string& what);

}  // namespace ddprun
