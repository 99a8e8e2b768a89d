#include "rendezvous/wire_protocol.hpp"

#include <array>

namespace ddprun::rendezvous {
namespace {

// Index = command byte.
constexpr std::array<Command, 9> kTorch113{Command::kSet,       Command::kCompareSet, Command::kGet,
                                           Command::kAdd,       Command::kCheck,      Command::kWait,
                                           Command::kGetNumKeys, Command::kWatchKey,  Command::kDeleteKey};
constexpr std::array<Command, 19> kTorch2{
    Command::kValidate,  Command::kSet,      Command::kCompareSet, Command::kGet,       Command::kAdd,
    Command::kCheck,     Command::kWait,     Command::kGetNumKeys, Command::kDeleteKey, Command::kAppend,
    Command::kMultiGet,  Command::kMultiSet, Command::kCancelWait, Command::kPing,      Command::kQueuePush,
    Command::kQueuePop,  Command::kQueueLen, Command::kListKeys,   Command::kBarrier};

}  // namespace

std::optional<Command> decodeCommand(Dialect dialect, uint8_t byte) {
  if (dialect == Dialect::kTorch113) {
    if (byte < kTorch113.size()) return kTorch113[byte];
  } else if (byte < kTorch2.size()) {
    return kTorch2[byte];
  }
  return std::nullopt;
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

}  // namespace ddprun::rendezvous
