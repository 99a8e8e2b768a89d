#include "store/reply.hpp"

#include <cstring>
#include <utility>

namespace ddprun::store {
namespace {
/// Values up to this size are copied into the reply; larger ones are shared.
constexpr size_t kShareFromBytes = 4096;
}  // namespace

std::string& Reply::tail() {
  if (pieces_.empty() || pieces_.back().shared) pieces_.emplace_back();
  return pieces_.back().owned;
}

Reply& Reply::u8(uint8_t value) {
  tail().push_back(static_cast<char>(value));
  size_ += 1;
  return *this;
}

Reply& Reply::u32(uint32_t value) {
  char raw[4];
  std::memcpy(raw, &value, 4);
  tail().append(raw, 4);
  size_ += 4;
  return *this;
}

Reply& Reply::i64(int64_t value) {
  char raw[8];
  std::memcpy(raw, &value, 8);
  tail().append(raw, 8);
  size_ += 8;
  return *this;
}

Reply& Reply::bytes(std::string_view value) {
  i64(static_cast<int64_t>(value.size()));
  tail().append(value);
  size_ += value.size();
  return *this;
}

Reply& Reply::value(const std::shared_ptr<const std::string>& value) {
  if (!value || value->size() < kShareFromBytes) return bytes(value ? std::string_view(*value) : std::string_view());
  i64(static_cast<int64_t>(value->size()));
  pieces_.push_back(Piece{std::string(), value});
  size_ += value->size();
  return *this;
}

std::deque<Reply::Piece> Reply::takePieces() {
  size_ = 0;
  return std::exchange(pieces_, {});
}

std::string Reply::flatten() const {
  std::string out;
  out.reserve(size_);
  for (const auto& piece : pieces_) out.append(piece.view());
  return out;
}

}  // namespace ddprun::store
