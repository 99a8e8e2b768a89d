#include "common/empty_dirs.hpp"

#include <filesystem>

namespace ddprun {
namespace fs = std::filesystem;

void pruneEmptyDirectories(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(dir, ec))) return;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.is_directory(ec) && !entry.is_symlink(ec)) pruneEmptyDirectories(entry.path().string());
  }
  if (fs::is_empty(dir, ec) && !ec) fs::remove(dir, ec);
}

}  // namespace ddprun
