#pragma once
// The end of what a worker wrote to stderr, kept bounded while the output relay passes it on: what a rank that wrote
// no torchelastic error file said last (a Python traceback printed at exit, a C++ error line), for its failure
// record. Pure: no I/O.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>

namespace ddprun::launcher {

class StderrTail {
 public:
  /// What is kept: the last 40 lines, 8 KiB at most (a longer line keeps its start).
  static constexpr size_t kMaxLines = 40;
  static constexpr size_t kMaxBytes = 8 * 1024;

  /// Consumes the next bytes of the stream. A '\r' not followed by '\n' starts its line over (a progress bar's
  /// redraw), as on a terminal.
  void feed(std::string_view bytes);
  /// The last Python traceback block printed ("Traceback (most recent call last):" to the end), else the last lines;
  /// a first line "[… N earlier lines not kept]" says when the block or the stream began before what is kept. ""
  /// when nothing was written.
  std::string text() const;

 private:
  void endLine();

  std::deque<std::string> lines_;
  size_t bytes_ = 0;
  std::string partial_;
  bool afterCr_ = false;
  uint64_t lineCount_ = 0;               ///< lines ended so far
  std::optional<uint64_t> tracebackAt_;  ///< index of the last traceback header line
};

/// The line of `tail` (StderrTail::text) that names the error: a traceback's exception line ("KeyError: 'x'", the
/// last unindented line after the header), else the last line that says error or fatal, else the last non-empty
/// line; at most 512 bytes. "" when `tail` is empty.
std::string lastErrorLine(const std::string& tail);

}  // namespace ddprun::launcher
