#pragma once
// The worker's log lines: "[time] [worker rank R] [level] text", informational lines on stdout, warnings and
// errors on stderr (so a launcher or a shell redirect can tell them apart), level from DDPRUN_LOG_LEVEL.
#include <string>

namespace ddprun::worker {

/// Installs the default spdlog logger described above for global rank `rank` (RANK, as text).
void configureLogging(const std::string& rank);

}  // namespace ddprun::worker
