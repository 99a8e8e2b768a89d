#pragma once
// The log level in DDPRUN_LOG_LEVEL (and torchrun's LOGLEVEL), read the same way by ddprun and its worker.
#include <spdlog/common.h>

#include <optional>
#include <string>

namespace ddprun {

/// A level from spdlog's names or Python logging's (DEBUG, INFO, WARNING, ERROR, CRITICAL), any case;
/// nullopt for anything else.
std::optional<spdlog::level::level_enum> parseLogLevel(const std::string& text);

}  // namespace ddprun
