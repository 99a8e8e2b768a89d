#pragma once
// Incremental parser of TCPStore requests. Bytes are fed as they arrive, in any split; the parser keeps
// the request it is inside and resumes at the very field (and byte) where the previous feed stopped, so
// a request that arrives in a million pieces is still read once, in linear time. Every declared length
// and count is checked against StoreLimits before anything is stored, and a request's keys are kept as
// they arrive, never pre-sized from a count the client claims. Layouts follow wire_protocol.hpp.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "store/store_limits.hpp"
#include "store/wire_protocol.hpp"

namespace ddprun::store {

/// One decoded request.
struct Request {
  Command command = Command::kGetNumKeys;
  std::vector<std::string> keys;
  std::vector<std::string> values;  ///< SET/APPEND/QUEUE_PUSH: 1; COMPARE_SET: expected, desired; MULTI_SET: n
  int64_t integer = 0;              ///< ADD delta; BARRIER world size
  uint32_t word = 0;                ///< VALIDATE magic; PING nonce
};

class RequestParser {
 public:
  enum class Status {
    kNeedMore,  ///< every byte fed was consumed; the request is not complete yet
    kOk,        ///< a request is complete: take it with takeRequest()
    kBad,       ///< malformed or over a limit: error() says why, limitName() which limit (if one)
  };

  RequestParser(Dialect dialect, const StoreLimits& limits) : dialect_(dialect), limits_(limits) {}

  /// How many bytes a value stored under `key` may take now (the room left in the store's memory budget, plus
  /// what the key holds for a value that replaces it; empty `key`: no replacement). A value declared longer is
  /// refused as soon as its length arrives, before its bytes are read (limit memory-budget-bytes).
  using ValueRoom = std::function<uint64_t(const std::string& key)>;
  void setValueRoom(ValueRoom room) { valueRoom_ = std::move(room); }

  /// Consumes bytes from the front of `input` until one request completes or `input` runs out; adds the
  /// number of bytes used to `consumed`. After kBad the parser must not be fed again.
  Status feed(std::string_view input, size_t& consumed);

  /// The completed request (after kOk); the parser is then ready for the next one.
  Request takeRequest();

  Dialect dialect() const { return dialect_; }
  /// True while part of a request has been read.
  bool inRequest() const { return step_ != Step::kCommand; }
  /// Memory held by the partial request (bytes, with a per-string overhead).
  uint64_t bufferedBytes() const {
    return requestBytes_ + kStringOverhead * (request_.keys.size() + request_.values.size());
  }
  /// Why the last feed returned kBad (names the command and the field).
  const std::string& error() const { return error_; }
  /// The StoreLimits flag name the bad request exceeded, or nullptr when it was merely malformed.
  const char* limitName() const { return limitName_; }

 private:
  static constexpr uint64_t kStringOverhead = 32;
  /// Where in the request the parser is.
  enum class Step { kCommand, kFixed, kLength, kBytes };
  /// What a field holds.
  enum class Field { kU32, kI64, kCount, kKey, kValue, kDone };

  Field fieldAt(size_t index) const;
  /// Sets up the next field (or completes the request); false when the request is complete.
  bool beginField();
  bool finishFixed();
  bool beginString(uint64_t length);
  Status fail(std::string why, const char* limit = nullptr);
  /// The size limit of the request being parsed (bytes): max-key-list-bytes for key-only requests (when lower),
  /// max-request-bytes otherwise; and that limit's name.
  uint64_t requestCap() const;
  const char* requestCapName() const;

  Dialect dialect_;
  StoreLimits limits_;  ///< a copy: a parser never outlives its limits
  Step step_ = Step::kCommand;
  Request request_;
  size_t fieldIndex_ = 0;       ///< fields completed after the command byte
  Field field_ = Field::kDone;  ///< the field being read
  uint64_t count_ = 0;          ///< key count of CHECK/WAIT/MULTI_GET/MULTI_SET
  char scratch_[8] = {};        ///< a fixed-size integer being assembled
  size_t scratchHave_ = 0;
  size_t scratchNeed_ = 0;
  std::string* target_ = nullptr;  ///< the key or value being filled
  uint64_t stringLeft_ = 0;
  uint64_t requestBytes_ = 0;  ///< bytes of this request consumed so far
  std::string error_;
  const char* limitName_ = nullptr;
  ValueRoom valueRoom_;
  /// The key whose value the field being read would replace ("" when it adds rather than replaces).
  std::string replacedKey() const;
};

/// Decides a connection's dialect from its first bytes: 2.x connections open with VALIDATE and the magic
/// (00 CE F7 85 3C). nullopt while too few bytes have arrived to tell (at most 5 are needed).
std::optional<Dialect> detectDialect(std::string_view firstBytes);

}  // namespace ddprun::store
