#include "common/progress_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/error.hpp"
#include "common/untrusted_file.hpp"

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

/// A scalar line "name=value": the name as described in the header, the value a finite number.
std::optional<std::pair<std::string, double>> scalarLine(const std::string& line) {
  const size_t equals = line.find('=');
  if (equals == 0 || equals == std::string::npos || equals > 32) return std::nullopt;
  const std::string name = line.substr(0, equals);
  if (!std::isalpha(static_cast<unsigned char>(name[0]))) return std::nullopt;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.') return std::nullopt;
  }
  const std::string text = line.substr(equals + 1);
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end == nullptr || *end != '\0' || !std::isfinite(value)) return std::nullopt;
  return std::make_pair(name, value);
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
  for (const auto& [name, value] : record.scalars) {
    char number[64];
    std::snprintf(number, sizeof number, "%.9g", value);
    text += name + "=" + number + "\n";
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
  // Complete lines after the second: scalars.
  for (size_t from = end2 + 1, end = content.find('\n', from); end != std::string::npos;
       from = end + 1, end = content.find('\n', from)) {
    if (record.scalars.size() == kMaxProgressScalars) break;
    if (auto scalar = scalarLine(content.substr(from, end - from))) record.scalars.push_back(std::move(*scalar));
  }
  const std::string line2 = content.substr(end1 + 1, end2 - end1 - 1);
  if (auto scalar = scalarLine(line2)) record.scalars.insert(record.scalars.begin(), std::move(*scalar));
  if (record.scalars.size() > kMaxProgressScalars) record.scalars.resize(kMaxProgressScalars);
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
  // A report is a few dozen bytes (a few hundred with scalars); the rest is ignored.
  const auto content = readUntrustedFile(path, 1024);
  if (!content || content->empty()) return std::nullopt;
  return parseProgress(*content);
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
