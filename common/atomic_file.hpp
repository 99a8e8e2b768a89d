#pragma once
// Crash-safe file replacement: a reader sees either the old file or the complete new one, never a
// half-written file. The sequence is the classic write-temp, fsync, rename, fsync-directory.
#include <string>

namespace ddprun {

/// Flushes `tempPath` to disk, renames it over `finalPath` and syncs the directory, so the rename
/// survives a crash. Both paths must be in the same directory. Throws IoError naming the file.
void commitFile(const std::string& tempPath, const std::string& finalPath);

/// Writes `contents` to `path` atomically (temp file beside it, then commitFile). Throws IoError.
void writeFileAtomically(const std::string& path, const std::string& contents);

/// A temporary name beside `finalPath`, unique to this process: "<finalPath>.tmp.<pid>".
std::string tempPathFor(const std::string& finalPath);

}  // namespace ddprun
