#pragma once
// Incremental parser of TCPStore requests: it never assumes one request per read, and it checks every
// length against the limits before allocating, so a malformed or hostile client costs at most one
// connection. Layouts follow wire_protocol.hpp.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rendezvous/wire_protocol.hpp"

namespace ddprun::rendezvous {

/// Size caps (bytes, counts). A request over any cap is rejected and its connection closed.
struct Limits {
  uint64_t maxKeyBytes = 64 * 1024;
  uint64_t maxValueBytes = 64ull * 1024 * 1024;
  uint64_t maxKeysPerRequest = 128 * 1024;
};

/// One decoded request.
struct Request {
  Command command = Command::kGetNumKeys;
  std::vector<std::string> keys;
  std::vector<std::string> values;  ///< SET/APPEND/QUEUE_PUSH: 1; COMPARE_SET: expected, desired; MULTI_SET: n
  int64_t integer = 0;              ///< ADD delta; BARRIER world size
  uint32_t word = 0;                ///< VALIDATE magic; PING nonce
};

/// Result of one parse attempt.
struct ParseResult {
  enum class Status { kNeedMore, kOk, kBad } status = Status::kNeedMore;
  size_t consumed = 0;  ///< bytes of the request when kOk
  Request request;      ///< valid when kOk
  std::string error;    ///< why, when kBad (names the command and the field)
};

/// Parses the request at the start of `input` in `dialect`.
ParseResult parseRequest(std::string_view input, Dialect dialect, const Limits& limits);

/// Decides a connection's dialect from its first bytes: 2.x connections open with VALIDATE and the magic
/// (00 CE F7 85 3C). nullopt while too few bytes have arrived to tell.
std::optional<Dialect> detectDialect(std::string_view firstBytes);

}  // namespace ddprun::rendezvous
