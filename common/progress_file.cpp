#include "common/progress_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/error.hpp"

namespace ddprun {
namespace {

/// The decimal number spanning all of `text` (digits only, at most 18 of them), or nullopt.
std::optional<int64_t> wholeNumber(const std::string& text) {
  if (text.empty() || text.size() > 18) return std::nullopt;
  int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  return value;
}

}  // namespace

std::string formatProgress(const ProgressRecord& record) {
  std::string text = std::to_string(record.step) + "\n";
  if (record.samples) {
    text += std::to_string(*record.samples) + " " + (record.phase.empty() ? "train" : record.phase);
    if (record.busySeconds) {
      char busy[32];
      std::snprintf(busy, sizeof busy, " %.6f", *record.busySeconds);
      text += busy;
    }
    text += "\n";
  }
  return text;
}

std::optional<ProgressRecord> parseProgress(const std::string& content) {
  const size_t end1 = content.find('\n');
  if (end1 == std::string::npos) return std::nullopt;  // empty or the first line still being written
  auto step = wholeNumber(content.substr(0, end1));
  if (!step) return std::nullopt;
  ProgressRecord record;
  record.step = *step;
  const size_t end2 = content.find('\n', end1 + 1);
  if (end2 == std::string::npos) return record;
  const std::string line2 = content.substr(end1 + 1, end2 - end1 - 1);
  const size_t space = line2.find(' ');
  if (space == std::string::npos) return record;
  auto samples = wholeNumber(line2.substr(0, space));
  std::string phase = line2.substr(space + 1);
  std::string busy;
  if (const size_t second = phase.find(' '); second != std::string::npos) {
    busy = phase.substr(second + 1);
    phase.resize(second);
  }
  if (!samples || phase.empty() || phase.size() > 32 || busy.find(' ') != std::string::npos) return record;
  record.samples = samples;
  record.phase = std::move(phase);
  if (!busy.empty()) {
    char* end = nullptr;
    const double seconds = std::strtod(busy.c_str(), &end);
    if (end != nullptr && *end == '\0' && seconds >= 0) record.busySeconds = seconds;
  }
  return record;
}

std::optional<ProgressRecord> readProgressFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buffer[256];  // a report is a few dozen bytes; anything longer is not one
  const ssize_t n = ::read(fd, buffer, sizeof buffer);
  ::close(fd);
  if (n <= 0) return std::nullopt;
  return parseProgress(std::string(buffer, static_cast<size_t>(n)));
}

ProgressFileWriter::ProgressFileWriter(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw IoError("cannot open the progress file " + path + ": " + std::strerror(errno));
}

ProgressFileWriter::~ProgressFileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void ProgressFileWriter::report(const ProgressRecord& record) {
  const std::string text = formatProgress(record);
  // One pwrite of a few bytes: a reader sees the old or the new text, never a mix of the first two lines.
  const ssize_t written = ::pwrite(fd_, text.data(), text.size(), 0);
  if (written != static_cast<ssize_t>(text.size())) {
    throw IoError("cannot write the progress file " + path_ + ": " + std::strerror(written < 0 ? errno : EIO));
  }
  if (text.size() < lastSize_ && ::ftruncate(fd_, static_cast<off_t>(text.size())) != 0) {
    throw IoError("cannot truncate the progress file " + path_ + ": " + std::strerror(errno));
  }
  lastSize_ = text.size();
}

}  // namespace ddprun
