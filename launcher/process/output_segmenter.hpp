#pragma once
// Turns a worker's raw output into console text: every line gets the rank's prefix, and output is shown
// as it is written, not only at a newline. A '\n' ends a line; a '\r' ends a segment too, so a tqdm-style
// progress bar that rewrites its line ("\r 10%|█ |", "\r 20%|██|", …) moves on screen at its own pace,
// each redraw starting with the prefix; a partial line (a prompt, a bar without '\r') is shown when the
// caller decides it has waited long enough (flushPartial); a line longer than `maxLineBytes` is cut into
// pieces of that size, each on its own prefixed console line ending with kCutMark, so memory stays bounded. Pure: no
// I/O.
#include <cstddef>
#include <string>
#include <string_view>

namespace ddprun::launcher {

class OutputSegmenter {
 public:
  /// Console text ready to be written, with what the console writer needs to know about it.
  struct Piece {
    std::string text;
    bool continuesLine = false;   ///< starts in the middle of a line this source left open
    bool leavesLineOpen = false;  ///< does not end with '\n' (a partial line or a '\r' segment)
    bool empty() const { return text.empty(); }
  };

  /// Lines longer than this are cut (ddprun shows them in pieces of 1 MiB): every shorter line reaches the console
  /// whole, as one write of the console's writer.
  static constexpr size_t kDefaultMaxLineBytes = 1024 * 1024;
  /// Ends each piece of a cut line, before its '\n'.
  static constexpr std::string_view kCutMark = " [ddprun: line continues]";

  /// Bytes of the segment waiting for its end.
  size_t partialBytes() const { return pending_.size(); }

  explicit OutputSegmenter(std::string prefix, size_t maxLineBytes = kDefaultMaxLineBytes);

  /// Consumes `bytes`; returns the complete segments (and cut pieces) they finish. What is left waits
  /// for more bytes or for flushPartial().
  Piece feed(std::string_view bytes);
  /// Shows the waiting partial segment now, leaving its line open.
  Piece flushPartial();
  /// At end of stream: shows what waits and ends the line if this source left it open.
  Piece finish();
  /// True when bytes wait for a terminator.
  bool hasPartial() const { return !pending_.empty(); }
  const std::string& prefix() const { return prefix_; }

 private:
  void emit(Piece& piece, std::string_view segment);

  std::string prefix_;
  size_t maxLineBytes_;
  std::string pending_;        ///< bytes of the current segment not shown yet
  bool segmentShown_ = false;  ///< part of the current segment is already on the console
  bool afterCr_ = false;       ///< the last byte shown was a '\r' (a following '\n' belongs to it)
};

}  // namespace ddprun::launcher
