#include "launcher/history/failure_summary.hpp"

#include <spdlog/spdlog.h>

#include <ctime>
#include <filesystem>
#include <sstream>
#include <utility>

#include "common/error_file.hpp"
#include "launcher/process/stderr_tail.hpp"

namespace ddprun::launcher {
namespace {

/// Printed lines of an error file's traceback and message (a traceback of thousands of frames stays in the file).
constexpr size_t kMaxTracebackLines = 200;
constexpr size_t kMaxTracebackBytes = 32 * 1024;
constexpr size_t kMaxMessageLines = 20;
constexpr size_t kMaxMessageBytes = 4 * 1024;

std::string formatTime(int64_t seconds) {
  std::time_t t = static_cast<std::time_t>(seconds);
  std::tm tm{};
  char text[32];
  if (seconds < 0 || seconds > kMaxErrorFileTimestamp || localtime_r(&t, &tm) == nullptr ||
      std::strftime(text, sizeof text, "%Y-%m-%d_%H:%M:%S", &tm) == 0) {
    return std::to_string(seconds) + " s since the epoch";
  }
  return text;
}

/// The start of `message`: at most kMaxMessageLines lines and kMaxMessageBytes bytes.
std::string boundedMessage(const std::string& message) {
  size_t end = 0, lines = 0;
  while (end < message.size() && end < kMaxMessageBytes && lines < kMaxMessageLines) {
    if (message[end] == '\n') ++lines;
    ++end;
  }
  if (end >= message.size()) return message;
  return message.substr(0, end) + " [… " + std::to_string(message.size() - end) + " more bytes]";
}

std::string exitText(const WorkerFailure& f) {
  if (f.exit.signal != 0) return "-" + std::to_string(f.exit.signal);
  return std::to_string(f.exit.exitCode);
}

std::chrono::system_clock::time_point modificationTime(const std::string& path) {
  const auto written = std::filesystem::last_write_time(path);
  return std::chrono::time_point_cast<std::chrono::system_clock::duration>(
      written - std::filesystem::file_time_type::clock::now() + std::chrono::system_clock::now());
}

/// torchrun's traceback field: the Python stack from the error file, each line indented under the field
/// (torch/distributed/elastic/multiprocessing/errors/__init__.py, _format_failure).
std::string tracebackText(const WorkerFailure& f) {
  if (!f.traceback.empty()) {
    std::string text = f.fromStderr ? f.traceback
                                    : keepLastLines(f.traceback, kMaxTracebackLines, kMaxTracebackBytes,
                                                    "; the whole traceback is in " + f.errorFile);
    while (!text.empty() && text.back() == '\n') text.pop_back();
    std::string indented;
    for (char c : text) {
      indented += c;
      if (c == '\n') indented += "  ";
    }
    return indented;
  }
  if (f.exit.signal != 0) return f.message;
  return "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html";
}

void appendFailure(std::ostringstream& out, size_t index, const WorkerFailure& f, const std::string& host) {
  // "exitcode  : -9 (pid: N)" as torchrun writes it, so existing log parsers match; the name follows.
  out << "[" << index << "]:\n"
      << "  time      : " << formatTime(f.timestamp) << "\n"
      << "  host      : " << host << "\n"
      << "  rank      : " << f.globalRank << " (local_rank: " << f.localRank << ")\n"
      << "  exitcode  : " << exitText(f) << " (pid: " << f.pid << ")"
      << (f.exit.signal != 0 ? " " + signalName(f.exit.signal) : "") << "\n"
      << "  error_file: " << (f.fromErrorFile ? f.errorFile : "<N/A>") << "\n"
      << "  message   : " << f.message << "\n"
      << "  traceback : " << tracebackText(f) << "\n";
  if (!f.hint.empty()) out << "  hint      : " << f.hint << "\n";
}

}  // namespace

const char* toString(FailureCause cause) {
  switch (cause) {
    case FailureCause::kExit: return "exit";
    case FailureCause::kSignal: return "signal";
    case FailureCause::kHang: return "hang";
    case FailureCause::kOutputSilence: return "output silence";
    case FailureCause::kEarlyExit: return "early exit";
  }
  return "?";
}

std::string keepLastLines(const std::string& text, size_t maxLines, size_t maxBytes, const std::string& where) {
  size_t start = text.size();
  size_t lines = 0;
  // Walk back over whole lines while both bounds hold (a final '\n' ends the last line, it starts none).
  size_t scan = text.size() > 0 && text.back() == '\n' ? text.size() - 1 : text.size();
  while (scan > 0) {
    const size_t lineStart = text.rfind('\n', scan - 1);
    const size_t from = lineStart == std::string::npos ? 0 : lineStart + 1;
    if (lines + 1 > maxLines || text.size() - from > maxBytes) break;
    start = from;
    ++lines;
    if (from == 0) break;
    scan = lineStart;
  }
  if (start == 0) return text;
  if (start == text.size()) start = text.size() > maxBytes ? text.size() - maxBytes : 0;  // one line over the bound
  size_t omitted = 0;
  for (size_t i = 0; i < start; ++i) omitted += text[i] == '\n';
  return "[… " + std::to_string(omitted) + " earlier line" + (omitted == 1 ? "" : "s") + " not shown" + where + "]\n" +
         text.substr(start);
}

WorkerFailure describeFailure(int globalRank, int localRank, int pid, const WorkerExit& exit,
                              const std::string& errorFile, const std::string& stderrTail) {
  WorkerFailure f;
  f.globalRank = globalRank;
  f.localRank = localRank;
  f.pid = pid;
  f.exit = exit;
  f.errorFile = errorFile;
  f.timestamp = std::chrono::duration_cast<std::chrono::seconds>(exit.when.time_since_epoch()).count();
  f.order = exit.when;
  f.cause = exit.signal != 0     ? FailureCause::kSignal
            : exit.exitCode == 0 ? FailureCause::kEarlyExit
                                 : FailureCause::kExit;
  if (exit.signal != 0) {
    f.message = "Signal " + std::to_string(exit.signal) + " (" + signalName(exit.signal) + ") received by PID " +
                std::to_string(pid);
  } else if (exit.exitCode == 0) {
    f.message = "exited with code 0 while its peers still ran (their collectives then fail or wait for it)";
  } else {
    f.message = "exited with code " + std::to_string(exit.exitCode) + " and wrote no error file";
  }
  std::string unreadable;
  try {
    if (auto record = readErrorFile(errorFile)) {
      f.message = boundedMessage(record->message);
      f.traceback = std::move(record->callstack);
      if (record->timestamp > 0) f.timestamp = record->timestamp;
      f.fromErrorFile = true;
      f.order = modificationTime(errorFile);
    }
  } catch (const std::exception& e) {
    unreadable = " (its error file is unreadable: " + std::string(e.what()) + ")";
  }
  if (!f.fromErrorFile && !exit.succeeded() && !stderrTail.empty()) {
    // No error file (a script without @record, a crash, a C++ program): what it said last on stderr.
    f.traceback = stderrTail;
    f.fromStderr = true;
    if (exit.signal == 0) {
      if (const std::string line = lastErrorLine(stderrTail); !line.empty()) f.message = line;
    }
  }
  f.message += unreadable;
  spdlog::debug("failure of rank {}: ordered at {} ns", globalRank, f.order.time_since_epoch().count());
  return f;
}

std::string likelyCause(const std::vector<WorkerFailure>& failures, size_t root) {
  const WorkerFailure& f = failures[root];
  const std::string who = "rank " + std::to_string(f.globalRank);
  switch (f.cause) {
    case FailureCause::kEarlyExit: return who + " exited 0 while its peers still ran";
    case FailureCause::kHang:
      if (f.waitsOnPeers) return "every rank waited in a collective (a mismatched collective, or a peer elsewhere)";
      return who + " held the others up" + (f.stacksFile.empty() ? "" : " (its stacks: " + f.stacksFile + ")");
    case FailureCause::kOutputSilence: return who + " stopped writing output";
    case FailureCause::kExit:
    case FailureCause::kSignal: break;
  }
  return "";
}

size_t rootCauseIndex(const std::vector<WorkerFailure>& failures) {
  size_t best = 0;
  for (size_t i = 1; i < failures.size(); ++i) {
    // A rank that waits on its peers comes after every rank that does not; time decides within each kind.
    const auto key = [&](size_t k) { return std::make_pair(failures[k].waitsOnPeers, failures[k].order); };
    if (key(i) < key(best)) best = i;
  }
  return best;
}

bool errorFileWrittenBefore(const std::string& errorFile, std::chrono::system_clock::time_point instant) {
  std::error_code ec;
  if (errorFile.empty() || !std::filesystem::exists(errorFile, ec)) return false;
  try {
    return modificationTime(errorFile) < instant;
  } catch (const std::exception&) {
    return false;
  }
}

std::string formatFailureSummary(const std::string& program, const std::string& role,
                                 const std::vector<WorkerFailure>& failures, const std::string& host) {
  const size_t root = rootCauseIndex(failures);
  std::ostringstream out;
  const std::string rule(60, '=');
  out << rule << "\n" << program << " FAILED (role " << role << ")\n" << std::string(60, '-') << "\nFailures:\n";
  size_t shown = 0;
  for (size_t i = 0; i < failures.size(); ++i) {
    if (i != root) appendFailure(out, ++shown, failures[i], host);
  }
  if (shown == 0) out << "  <NO_OTHER_FAILURES>\n";
  out << std::string(60, '-') << "\nRoot Cause (first observed failure):\n";
  appendFailure(out, 0, failures[root], host);
  if (const std::string likely = likelyCause(failures, root); !likely.empty())
    out << "Likely cause: " << likely << "\n";
  out << rule << "\n";
  return out.str();
}

}  // namespace ddprun::launcher
