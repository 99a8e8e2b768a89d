#include "common/progress_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <sstream>

namespace ddprun {
namespace {

bool parseWhole(const std::string& text, int64_t& value) {
  if (text.empty() || text.size() > 19) return false;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  value = std::strtoll(text.c_str(), nullptr, 10);
  return true;
}

}  // namespace

std::optional<ProgressRecord> parseProgress(const std::string& text) {
  // Line 1 must be complete: a reader that catches "12" of "123\n" half-written must not see step 12.
  const auto newline = text.find('\n');
  if (newline == std::string::npos) return std::nullopt;
  std::string first = text.substr(0, newline);
  while (!first.empty() && (first.back() == '\r' || first.back() == ' ')) first.pop_back();
  ProgressRecord report;
  if (!parseWhole(first, report.step)) return std::nullopt;
  const auto secondEnd = text.find('\n', newline + 1);
  if (secondEnd == std::string::npos) return report;  // line 2 missing or not complete: ignore it
  std::istringstream fields(text.substr(newline + 1, secondEnd - newline - 1));
  std::string samples, phase, busy;
  fields >> samples >> phase >> busy;
  int64_t value = 0;
  if (parseWhole(samples, value)) report.samples = value;
  if (phase.size() <= 32) report.phase = phase;
  if (!busy.empty()) {
    char* end = nullptr;
    const double seconds = std::strtod(busy.c_str(), &end);
    if (end != nullptr && *end == '\0' && seconds >= 0) report.busySeconds = seconds;
  }
  return report;
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

std::string formatProgress(const ProgressRecord& report) {
  std::string text = std::to_string(report.step) + "\n";
  if (report.samples || !report.phase.empty() || report.busySeconds) {
    std::ostringstream line;
    line << report.samples.value_or(0) << ' ' << (report.phase.empty() ? "train" : report.phase);
    if (report.busySeconds) line << ' ' << *report.busySeconds;
    text += line.str() + "\n";
  }
  return text;
}

}  // namespace ddprun
