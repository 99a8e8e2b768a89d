#include "store/wire_protocol.hpp"

#include <array>
#include <cstring>

namespace ddprun::store {
namespace {

// Index = command byte.
constexpr std::array<Command, 9> kTorch113{Command::kSet,        Command::kCompareSet, Command::kGet,
                                           Command::kAdd,        Command::kCheck,      Command::kWait,
                                           Command::kGetNumKeys, Command::kWatchKey,   Command::kDeleteKey};
constexpr std::array<Command, 19> kTorch2{
    Command::kValidate, Command::kSet,      Command::kCompareSet, Command::kGet,       Command::kAdd,
    Command::kCheck,    Command::kWait,     Command::kGetNumKeys, Command::kDeleteKey, Command::kAppend,
    Command::kMultiGet, Command::kMultiSet, Command::kCancelWait, Command::kPing,      Command::kQueuePush,
    Command::kQueuePop, Command::kQueueLen, Command::kListKeys,   Command::kBarrier};

}  // namespace

std::optional<Command> decodeCommand(Dialect dialect, uint8_t byte) {
  if (dialect == Dialect::kTorch113) {
    if (byte < kTorch113.size()) return kTorch113[byte];
  } else if (byte < kTorch2.size()) {
    return kTorch2[byte];
  }
  return std::nullopt;
}

std::optional<uint8_t> encodeCommand(Dialect dialect, Command command) {
  auto find = [command](const auto& table) -> std::optional<uint8_t> {
    for (size_t i = 0; i < table.size(); ++i) {
      if (table[i] == command) return static_cast<uint8_t>(i);
    }
    return std::nullopt;
  };
  return dialect == Dialect::kTorch113 ? find(kTorch113) : find(kTorch2);
}

const char* commandName(Command command) {
  switch (command) {
    case Command::kValidate: return "VALIDATE";
    case Command::kSet: return "SET";
    case Command::kCompareSet: return "COMPARE_SET";
    case Command::kGet: return "GET";
    case Command::kAdd: return "ADD";
    case Command::kCheck: return "CHECK";
    case Command::kWait: return "WAIT";
    case Command::kGetNumKeys: return "GETNUMKEYS";
    case Command::kWatchKey: return "WATCH_KEY";
    case Command::kDeleteKey: return "DELETE_KEY";
    case Command::kAppend: return "APPEND";
    case Command::kMultiGet: return "MULTI_GET";
    case Command::kMultiSet: return "MULTI_SET";
    case Command::kCancelWait: return "CANCEL_WAIT";
    case Command::kPing: return "PING";
    case Command::kQueuePush: return "QUEUE_PUSH";
    case Command::kQueuePop: return "QUEUE_POP";
    case Command::kQueueLen: return "QUEUE_LEN";
    case Command::kListKeys: return "LIST_KEYS";
    case Command::kBarrier: return "BARRIER";
  }
  return "UNKNOWN";
}

WireWriter& WireWriter::u8(uint8_t value) {
  out_.push_back(static_cast<char>(value));
  return *this;
}

WireWriter& WireWriter::u32(uint32_t value) {
  char raw[4];
  std::memcpy(raw, &value, 4);
  out_.append(raw, 4);
  return *this;
}

WireWriter& WireWriter::i64(int64_t value) {
  char raw[8];
  std::memcpy(raw, &value, 8);
  out_.append(raw, 8);
  return *this;
}

WireWriter& WireWriter::bytes(const std::string& value) {
  i64(static_cast<int64_t>(value.size()));
  out_.append(value);
  return *this;
}

}  // namespace ddprun::store
