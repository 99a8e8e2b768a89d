#pragma once
// ddprun's own log lines: spdlog's default logger, written through the non-blocking console (stderr). Its level:
// common/log_level.hpp.
namespace ddprun::launcher {

/// Routes spdlog's default logger through consoleErr() with ddprun's line format.
void installConsoleLogger();

}  // namespace ddprun::launcher
