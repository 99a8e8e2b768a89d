#pragma once
// One reply of the store, as pieces: bytes it built (lengths, integers, small values) and stored values it
// shares without a copy. A 60 MiB GET is then an 8-byte length and a reference, built in constant time, and
// the connection sends it in slices (StoreConnection::write), so no reply holds up a turn of the loop.
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>

namespace ddprun::store {

class Reply {
 public:
  /// A piece: `owned` bytes, or a shared stored value (when `shared` is set).
  struct Piece {
    std::string owned;
    std::shared_ptr<const std::string> shared;
    std::string_view view() const { return shared ? std::string_view(*shared) : std::string_view(owned); }
  };

  Reply& u8(uint8_t value);
  Reply& u32(uint32_t value);
  Reply& i64(int64_t value);
  /// uint64 length, then the bytes (copied).
  Reply& bytes(std::string_view value);
  /// uint64 length, then the stored value: shared when large, copied when small (a reference costs more).
  Reply& value(const std::shared_ptr<const std::string>& value);

  /// Total bytes on the wire.
  uint64_t size() const { return size_; }
  /// The pieces, oldest first; the reply is empty afterwards.
  std::deque<Piece> takePieces();
  /// All bytes in one string (for tests and small replies).
  std::string flatten() const;

 private:
  std::string& tail();

  std::deque<Piece> pieces_;
  uint64_t size_ = 0;
};

}  // namespace ddprun::store
