#include "common/log_level.hpp"

#include <algorithm>
#include <cctype>
#include <map>

namespace ddprun {

std::optional<spdlog::level::level_enum> parseLogLevel(const std::string& text) {
  std::string name = text;
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  static const std::map<std::string, spdlog::level::level_enum> kLevels = {
      {"trace", spdlog::level::trace},  {"debug", spdlog::level::debug},       {"info", spdlog::level::info},
      {"warning", spdlog::level::warn}, {"warn", spdlog::level::warn},         {"error", spdlog::level::err},
      {"err", spdlog::level::err},      {"critical", spdlog::level::critical}, {"off", spdlog::level::off}};
  auto it = kLevels.find(name);
  if (it == kLevels.end()) return std::nullopt;
  return it->second;
}

}  // namespace ddprun
