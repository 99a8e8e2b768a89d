#include "launcher/watch/evidence/flight_recorder.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

namespace ddprun::launcher {
namespace {

/// Ring-buffer entries asked for when the user sets none (torch 2.x's own default; a few MB per rank).
constexpr const char* kDefaultTraceBuffer = "2000";

}  // namespace

FlightRecorderFiles flightRecorderFiles(const std::string& rankDir, int rank,
                                        const std::function<std::optional<std::string>(const char*)>& userEnv) {
  FlightRecorderFiles files;
  files.dumpPrefix =
      userEnv(kDumpFileEnv).value_or(userEnv(kLegacyDumpFileEnv).value_or(rankDir + "/nccl_trace_rank_"));
  files.dumpFile = files.dumpPrefix + std::to_string(rank);
  files.pipePrefix = userEnv(kDumpPipeEnv).value_or(rankDir + "/nccl_dump_rank_");
  files.pipeFile = files.pipePrefix + std::to_string(rank) + ".pipe";
  return files;
}

std::map<std::string, std::string> flightRecorderEnvironment(
    const FlightRecorderFiles& files, const std::function<std::optional<std::string>(const char*)>& userEnv) {
  std::map<std::string, std::string> env;
  // Both dump variables: torch >= 2.5 reads the first, older 2.x the second.
  if (!userEnv(kDumpFileEnv) && !userEnv(kLegacyDumpFileEnv)) {
    env[kDumpFileEnv] = files.dumpPrefix;
    env[kLegacyDumpFileEnv] = files.dumpPrefix;
  }
  if (!userEnv(kDumpPipeEnv)) env[kDumpPipeEnv] = files.pipePrefix;
  if (!userEnv(kTraceBufferEnv) && !userEnv(kTraceBufferNewEnv)) env[kTraceBufferEnv] = kDefaultTraceBuffer;
  if (!userEnv(kDumpOnTimeoutEnv)) env[kDumpOnTimeoutEnv] = "1";
  return env;
}

std::string dumpKeyValue(int rank) {
  std::string value(sizeof(int), '\0');
  std::memcpy(value.data(), &rank, sizeof(int));
  return value;
}

bool pokeDumpPipe(const std::string& pipe) {
  // O_NONBLOCK: opening a FIFO for writing fails with ENXIO when nobody reads it, instead of waiting.
  const int fd = ::open(pipe.c_str(), O_WRONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return false;
  struct stat info {};
  bool asked = false;
  if (::fstat(fd, &info) == 0 && S_ISFIFO(info.st_mode)) asked = ::write(fd, "1", 1) == 1;
  ::close(fd);
  return asked;
}

DumpFileWatch::DumpFileWatch(std::string file) : file_(std::move(file)), before_(lookAt(file_)), last_(before_) {}

DumpFileWatch::Look DumpFileWatch::lookAt(const std::string& file) {
  struct stat info {};
  Look look;
  if (::lstat(file.c_str(), &info) == 0 && S_ISREG(info.st_mode)) {
    look.inode = info.st_ino;
    look.size = info.st_size;
    look.mtimeNs = static_cast<long long>(info.st_mtim.tv_sec) * 1'000'000'000LL + info.st_mtim.tv_nsec;
  }
  return look;
}

bool DumpFileWatch::settled(std::chrono::steady_clock::time_point now, std::chrono::milliseconds quiet) {
  const Look look = lookAt(file_);
  if (!since_ || !(look == last_)) {
    last_ = look;
    since_ = now;
  }
  return written() && now - *since_ >= quiet;
}

}  // namespace ddprun::launcher
