#include "launcher/process/stderr_tail.hpp"

#include <algorithm>
#include <cctype>
#include <vector>

namespace ddprun::launcher {
namespace {

constexpr std::string_view kTracebackHeader = "Traceback (most recent call last):";
constexpr size_t kMaxErrorLineBytes = 512;

bool startsWith(std::string_view text, std::string_view prefix) { return text.substr(0, prefix.size()) == prefix; }

std::vector<std::string_view> splitLines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = text.find('\n', start);
    if (end == std::string_view::npos) {
      if (start < text.size()) lines.push_back(text.substr(start));
      break;
    }
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

bool saysError(std::string_view line) {
  std::string lower(line);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  return lower.find("error") != std::string::npos || lower.find("fatal") != std::string::npos ||
         lower.find("[critical]") != std::string::npos;
}

std::string capped(std::string_view line) {
  if (line.size() <= kMaxErrorLineBytes) return std::string(line);
  return std::string(line.substr(0, kMaxErrorLineBytes)) + "…";
}

}  // namespace

void StderrTail::feed(std::string_view bytes) {
  for (char c : bytes) {
    if (afterCr_ && c != '\n') partial_.clear();  // "\r" then text: a redraw of the line
    afterCr_ = c == '\r';
    if (c == '\r') continue;
    if (c == '\n') {
      endLine();
      continue;
    }
    if (partial_.size() < kMaxBytes) partial_ += c;
  }
}

void StderrTail::endLine() {
  if (startsWith(partial_, kTracebackHeader)) tracebackAt_ = lineCount_;
  ++lineCount_;
  bytes_ += partial_.size() + 1;
  lines_.push_back(std::move(partial_));
  partial_.clear();
  while (lines_.size() > kMaxLines || (bytes_ > kMaxBytes && lines_.size() > 1)) {
    bytes_ -= lines_.front().size() + 1;
    lines_.pop_front();
  }
}

std::string StderrTail::text() const {
  const uint64_t first = lineCount_ - lines_.size();  // index of the first line kept
  uint64_t from = first;
  if (tracebackAt_ && *tracebackAt_ >= first) from = *tracebackAt_;
  std::string out;
  if (from > 0 && !(tracebackAt_ && from == *tracebackAt_)) {
    out = "[… " + std::to_string(from) + " earlier line" + (from == 1 ? "" : "s") + " not kept]\n";
  }
  for (uint64_t i = from; i < lineCount_; ++i) out += lines_[i - first] + "\n";
  if (!partial_.empty()) out += partial_ + "\n";
  return out;
}

std::string lastErrorLine(const std::string& tail) {
  const auto lines = splitLines(tail);
  size_t header = lines.size();
  for (size_t i = 0; i < lines.size(); ++i) {
    if (startsWith(lines[i], kTracebackHeader)) header = i;
  }
  if (header < lines.size()) {
    for (size_t i = lines.size(); i-- > header + 1;) {
      const auto line = lines[i];
      if (!line.empty() && line[0] != ' ' && line[0] != '\t' && !startsWith(line, "[… ")) return capped(line);
    }
  }
  for (size_t i = lines.size(); i-- > 0;) {
    if (saysError(lines[i])) return capped(lines[i]);
  }
  for (size_t i = lines.size(); i-- > 0;) {
    if (lines[i].find_first_not_of(" \t") != std::string_view::npos) return capped(lines[i]);
  }
  return "";
}

}  // namespace ddprun::launcher
