#include "launcher/process/output_segmenter.hpp"

namespace ddprun::launcher {

OutputSegmenter::OutputSegmenter(std::string prefix, size_t maxLineBytes)
    : prefix_(std::move(prefix)), maxLineBytes_(maxLineBytes > 0 ? maxLineBytes : 1) {}

void OutputSegmenter::emit(Piece& piece, std::string_view segment) {
  if (segment.empty()) return;
  if (piece.text.empty()) piece.continuesLine = segmentShown_ || (afterCr_ && segment == "\n");
  // "\r\n" is one line end, not a '\r' segment followed by an empty line.
  const bool crlfTail = afterCr_ && segment == "\n";
  if (!segmentShown_ && !crlfTail) piece.text += prefix_;
  piece.text += segment;
  const char last = segment.back();
  segmentShown_ = last != '\n' && last != '\r';
  afterCr_ = last == '\r';
  piece.leavesLineOpen = last != '\n';
}

OutputSegmenter::Piece OutputSegmenter::feed(std::string_view bytes) {
  Piece piece;
  size_t start = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const char c = bytes[i];
    if (c == '\r' && i == start && pending_.empty() && !segmentShown_) {
      start = i + 1;  // a '\r' at the start of a console line moves nothing (tqdm begins each redraw with one)
    } else if (c == '\n' || c == '\r') {
      pending_.append(bytes.substr(start, i + 1 - start));
      emit(piece, pending_);
      pending_.clear();
      start = i + 1;
    } else if (pending_.size() + (i + 1 - start) > maxLineBytes_) {
      pending_.append(bytes.substr(start, i - start));  // maxLineBytes_ of the line
      pending_ += kCutMark;                             // cut: the rest of the line starts a new prefixed console line
      pending_ += '\n';
      emit(piece, pending_);
      pending_.clear();
      start = i;  // this byte begins the next piece
    }
  }
  pending_.append(bytes.substr(start));
  return piece;
}

OutputSegmenter::Piece OutputSegmenter::flushPartial() {
  Piece piece;
  emit(piece, pending_);
  pending_.clear();
  return piece;
}

OutputSegmenter::Piece OutputSegmenter::finish() {
  Piece piece = flushPartial();
  if (segmentShown_) emit(piece, "\n");
  segmentShown_ = false;
  afterCr_ = false;
  return piece;
}

}  // namespace ddprun::launcher
