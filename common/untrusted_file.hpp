#pragma once
// Reading a file that another program controls (a worker's progress file, error file or stacks file): ddprun
// must never block on it or be sent elsewhere by it. The file is opened non-blocking and without following a
// symbolic link at its end, must be a regular file, and is read up to a bound.
#include <cstddef>
#include <optional>
#include <string>

namespace ddprun {

/// Up to `maxBytes` of the regular file at `path`; nullopt when it is missing, a symbolic link, a FIFO, a
/// directory or anything else but a regular file, or cannot be read. Never blocks on a FIFO or device.
std::optional<std::string> readUntrustedFile(const std::string& path, size_t maxBytes);

}  // namespace ddprun
