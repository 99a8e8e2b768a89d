#pragma once
// Removing the empty directories a run leaves behind, and never anything else.
#include <string>

namespace ddprun {

/// Removes the empty directories under `dir` (deepest first, never following a link), then `dir` itself if it
/// ends up empty. Files are never touched; errors (a directory gone meanwhile) are ignored.
void pruneEmptyDirectories(const std::string& dir);

}  // namespace ddprun
