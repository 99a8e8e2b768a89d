#include "common/env.hpp"

#include <cctype>
#include <cstdlib>
#include <limits>
#include <sstream>

#include "common/error.hpp"

namespace ddprun {

std::optional<std::string> getEnv(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

int64_t parseInt(const std::string& text, const std::string& what) {
  size_t used = 0;
  long long value = 0;
  try {
    value = std::stoll(text, &used, 10);
  } catch (const std::exception&) {
    throw ConfigError(what + ": expected a whole number, got '" + text + "'");
  }
  if (used != text.size()) throw ConfigError(what + ": expected a whole number, got '" + text + "'");
  return static_cast<int64_t>(value);
}

int64_t parseIntIn(const std::string& text, const std::string& what, int64_t min, int64_t max) {
  int64_t value = 0;
  try {
    value = parseInt(text, what);
  } catch (const ConfigError&) {
    throw ConfigError(what + ": expected a whole number in " + std::to_string(min) + ".." + std::to_string(max) +
                      ", got '" + text + "'");
  }
  if (value < min || value > max) {
    throw ConfigError(what + ": " + text + " is outside " + std::to_string(min) + ".." + std::to_string(max));
  }
  return value;
}

namespace {

double parseDecimal(const std::string& text, const std::string& what, double min, double max, const char* noun) {
  auto range = [&] {
    std::ostringstream out;
    out << min << ".." << max;
    return out.str();
  };
  double value = 0;
  size_t used = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  // Leading blanks and trailing units ("5s") are both refused: one spelling everywhere.
  if (text.empty() || used != text.size() || std::isspace(static_cast<unsigned char>(text[0]))) {
    throw ConfigError(what + ": expected " + noun + " (" + range() + "), got '" + text + "'");
  }
  // Written so that NaN fails too.
  if (!(value >= min && value <= max)) throw ConfigError(what + ": " + text + " is outside " + range());
  return value;
}

}  // namespace

double parseNumber(const std::string& text, const std::string& what, double min, double max) {
  return parseDecimal(text, what, min, max, "a number");
}

double parseSeconds(const std::string& text, const std::string& what, double min, double max) {
  return parseDecimal(text, what, min, max, "a number of seconds");
}

int64_t getEnvInt(const std::string& name, int64_t fallback) {
  auto value = getEnv(name);
  if (!value) return fallback;
  return parseInt(*value, "environment variable " + name);
}

bool getEnvBool(const std::string& name, bool fallback) {
  auto value = getEnv(name);
  if (!value) return fallback;
  const std::string& v = *value;
  if (v == "1" || v == "true" || v == "True" || v == "TRUE" || v == "yes") return true;
  if (v == "0" || v == "false" || v == "False" || v == "FALSE" || v == "no") return false;
  throw ConfigError("environment variable " + name + ": expected True or False, got '" + v + "'");
}

}  // namespace ddprun
