#include "common/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/error.hpp"

namespace ddprun {
namespace {

std::string errnoText() { return std::strerror(errno); }

void fsyncPath(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags);
  if (fd < 0) throw IoError("cannot open " + path + " to sync it: " + errnoText());
  int rc = ::fsync(fd);
  int savedErrno = errno;
  ::close(fd);
  if (rc != 0) {
    errno = savedErrno;
    throw IoError("fsync of " + path + " failed: " + errnoText());
  }
}

}  // namespace

std::string tempPathFor(const std::string& finalPath) { return finalPath + ".tmp." + std::to_string(::getpid()); }

void commitFile(const std::string& tempPath, const std::string& finalPath) {
  fsyncPath(tempPath, O_RDONLY);
  if (std::rename(tempPath.c_str(), finalPath.c_str()) != 0) {
    std::string why = errnoText();
    std::remove(tempPath.c_str());
    throw IoError("cannot rename " + tempPath + " to " + finalPath + ": " + why);
  }
  auto dir = std::filesystem::path(finalPath).parent_path();
  fsyncPath(dir.empty() ? "." : dir.string(), O_RDONLY | O_DIRECTORY);
}

void writeFileAtomically(const std::string& path, const std::string& contents) {
  const std::string temp = tempPathFor(path);
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (!out) throw IoError("cannot create " + temp + ": " + errnoText());
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    out.flush();
    if (!out) {
      std::remove(temp.c_str());
      throw IoError("cannot write " + temp);
    }
  }
  commitFile(temp, path);
}

}  // namespace ddprun
