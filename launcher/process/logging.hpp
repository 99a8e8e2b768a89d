#pragma once
// ddprun's own log lines: spdlog's default logger, written through the non-blocking console (stderr), and
// the log level from DDPRUN_LOG_LEVEL or torchrun's LOGLEVEL.
#include <spdlog/common.h>

#include <optional>
#include <string>

namespace ddprun::launcher {

/// Routes spdlog's default logger through consoleErr() with ddprun's line format.
void installConsoleLogger();

/// A level from spdlog's names or Python logging's (DEBUG, INFO, WARNING, ERROR, CRITICAL), any case;
/// nullopt for anything else.
std::optional<spdlog::level::level_enum> parseLogLevel(const std::string& text);

}  // namespace ddprun::launcher
