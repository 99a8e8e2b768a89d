#include "rendezvous/request_parser.hpp"

#include <cstring>

namespace ddprun::rendezvous {
namespace {

/// Reads fields from the input; any read past the end marks the cursor incomplete.
class Cursor {
 public:
  Cursor(std::string_view input, const Limits& limits) : in_(input), limits_(limits) {}

  template <typename T>
  bool readInt(T& out) {
    if (in_.size() - pos_ < sizeof(T)) return needMore();
    std::memcpy(&out, in_.data() + pos_, sizeof(T));  // native little-endian, as c10d writes it
    pos_ += sizeof(T);
    return true;
  }

  bool readBytes(std::string& out, uint64_t cap, const char* what) {
    uint64_t length = 0;
    if (!readInt(length)) return false;
    if (length > cap) return bad(std::string(what) + " of " + std::to_string(length) + " bytes exceeds the limit of " +
                                 std::to_string(cap));
    if (in_.size() - pos_ < length) return needMore();
    out.assign(in_.data() + pos_, length);
    pos_ += length;
    return true;
  }

  bool readKey(std::string& out) { return readBytes(out, limits_.maxKeyBytes, "key"); }
  bool readValue(std::string& out) { return readBytes(out, limits_.maxValueBytes, "value"); }

  bool readCount(uint64_t& count) {
    if (!readInt(count)) return false;
    if (count > limits_.maxKeysPerRequest) {
      return bad("key count " + std::to_string(count) + " exceeds the limit of " +
                 std::to_string(limits_.maxKeysPerRequest));
    }
    return true;
  }

  bool readKeys(std::vector<std::string>& keys) {
    uint64_t count = 0;
    if (!readCount(count)) return false;
    keys.resize(count);
    for (auto& key : keys) {
      if (!readKey(key)) return false;
    }
    return true;
  }

  size_t position() const { return pos_; }
  bool incomplete() const { return incomplete_; }
  const std::string& error() const { return error_; }

 private:
  bool needMore() {
    incomplete_ = true;
    return false;
  }
  bool bad(std::string why) {
    error_ = std::move(why);
    return false;
  }

  std::string_view in_;
  const Limits& limits_;
  size_t pos_ = 0;
  bool incomplete_ = false;
  std::string error_;
};

bool parseBody(Cursor& in, Request& r) {
  switch (r.command) {
    case Command::kValidate:
    case Command::kPing:
      return in.readInt(r.word);
    case Command::kSet:
    case Command::kAppend:
    case Command::kQueuePush:
      r.keys.resize(1);
      r.values.resize(1);
      return in.readKey(r.keys[0]) && in.readValue(r.values[0]);
    case Command::kCompareSet:
      r.keys.resize(1);
      r.values.resize(2);
      return in.readKey(r.keys[0]) && in.readValue(r.values[0]) && in.readValue(r.values[1]);
    case Command::kGet:
    case Command::kDeleteKey:
    case Command::kWatchKey:
    case Command::kQueuePop:
    case Command::kQueueLen:
      r.keys.resize(1);
      return in.readKey(r.keys[0]);
    case Command::kAdd:
    case Command::kBarrier:
      r.keys.resize(1);
      return in.readKey(r.keys[0]) && in.readInt(r.integer);
    case Command::kCheck:
    case Command::kWait:
    case Command::kMultiGet:
      return in.readKeys(r.keys);
    case Command::kMultiSet: {
      uint64_t count = 0;
      if (!in.readCount(count)) return false;
      r.keys.resize(count);
      r.values.resize(count);
      for (uint64_t i = 0; i < count; ++i) {
        if (!in.readKey(r.keys[i]) || !in.readValue(r.values[i])) return false;
      }
      return true;
    }
    case Command::kGetNumKeys:
    case Command::kCancelWait:
    case Command::kListKeys:
      return true;
  }
  return true;
}

}  // namespace

ParseResult parseRequest(std::string_view input, Dialect dialect, const Limits& limits) {
  ParseResult result;
  if (input.empty()) return result;
  const auto byte = static_cast<uint8_t>(input[0]);
  auto command = decodeCommand(dialect, byte);
  if (!command) {
    result.status = ParseResult::Status::kBad;
    result.error = "unknown command byte " + std::to_string(byte) +
                   (dialect == Dialect::kTorch113 ? " (torch 1.13 dialect)" : " (torch 2.x dialect)");
    return result;
  }
  result.request.command = *command;
  Cursor cursor(input.substr(1), limits);
  if (parseBody(cursor, result.request)) {
    result.status = ParseResult::Status::kOk;
    result.consumed = 1 + cursor.position();
  } else if (!cursor.incomplete()) {
    result.status = ParseResult::Status::kBad;
    result.error = std::string(commandName(*command)) + ": " + cursor.error();
  }
  return result;
}

std::optional<Dialect> detectDialect(std::string_view firstBytes) {
  if (firstBytes.empty()) return std::nullopt;
  if (firstBytes[0] != 0) return Dialect::kTorch113;
  const unsigned char magic[5] = {0x00, 0xCE, 0xF7, 0x85, 0x3C};
  const size_t n = std::min<size_t>(firstBytes.size(), 5);
  if (std::memcmp(firstBytes.data(), magic, n) != 0) return Dialect::kTorch113;
  if (n < 5) return std::nullopt;
  return Dialect::kTorch2;
}

}  // namespace ddprun::rendezvous
