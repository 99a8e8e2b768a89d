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

/// Parses a whole number in [min, max]; throws ConfigError naming `what` and the range otherwise
/// (4294967296 for a count is an error, never a silent wrap-around).
int64_t parseIntIn(const std::string& text, const std::string& what, int64_t min, int64_t max);

/// Parses a plain decimal number (no unit), finite, within [min, max]. Throws ConfigError naming `what`.
double parseNumber(const std::string& text, const std::string& what, double min, double max);

/// Parses a duration in seconds: a plain decimal number ("5", "0.5"; no unit, no "5s"), finite, within
/// [min, max]. Throws ConfigError naming `what`, the text and the range. The one duration parser of the
/// project: flags, --config values, --rdzv-conf keys and PET_ variables all come through it.
double parseSeconds(const std::string& text, const std::string& what, double min, double max);

}  // namespace ddprun
