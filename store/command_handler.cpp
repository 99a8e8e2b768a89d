#include "store/command_handler.hpp"

#include "store/log_text.hpp"

namespace ddprun::store {
namespace {

constexpr uint64_t kLengthBytes = 8;  // every value in a reply is preceded by its uint64 length

uint64_t storedSize(const KvState& state, const std::string& key) {
  const std::string* value = state.find(key);
  return value == nullptr ? 0 : value->size();
}

/// The reply size of a request whose reply depends on the data; 0 for the fixed-size ones.
uint64_t replySize(const KvState& state, const Request& r) {
  switch (r.command) {
    case Command::kGet:
      return kLengthBytes + storedSize(state, r.keys[0]);
    case Command::kCompareSet:  // at most the larger of what is stored and what is sent
      return kLengthBytes + std::max<uint64_t>(storedSize(state, r.keys[0]),
                                               std::max(r.values[0].size(), r.values[1].size()));
    case Command::kMultiGet: {
      uint64_t total = 0;
      for (const auto& key : r.keys) total += kLengthBytes + storedSize(state, key);
      return total;
    }
    case Command::kListKeys:
      return kLengthBytes + static_cast<uint64_t>(state.numKeys()) * kLengthBytes + state.keyBytes();
    case Command::kQueuePop:
      return 2 * kLengthBytes + state.queueFrontSize(r.keys[0]);
    default:
      return 0;
  }
}

HandlerOutcome notANumber(const char* command, const std::string& key) {
  HandlerOutcome out;
  out.error = std::string(command) + " on key '" + escapeForLog(key) +
              "' whose value is not a decimal integer, or would leave the 64-bit range";
  return out;
}

}  // namespace

HandlerOutcome handleRequest(KvState& state, ConnectionId connection, const Request& r,
                             const ReplyAllowance& allowance) {
  HandlerOutcome out;
  if (const uint64_t size = replySize(state, r); size > allowance.bytes) {
    out.error = std::string(commandName(r.command)) + " would need a reply of " + std::to_string(size) +
                " bytes, over the " + std::to_string(allowance.bytes) + " bytes allowed";
    out.limit = allowance.limit;
    return out;
  }
  ReplyWriter reply;
  switch (r.command) {
    case Command::kValidate:  // checked by the connection on the first request; later ones are ignored
      return out;
    case Command::kSet:
      state.set(r.keys[0], r.values[0], out.woken);
      return out;
    case Command::kCompareSet:
      out.reply = reply.bytes(state.compareSet(r.keys[0], r.values[0], r.values[1], out.woken)).take();
      return out;
    case Command::kGet: {
      // Clients WAIT before GET, so a missing key is rare; answer empty as the libuv server does.
      const std::string* value = state.find(r.keys[0]);
      out.reply = reply.bytes(value ? *value : std::string()).take();
      return out;
    }
    case Command::kAdd: {
      auto value = state.add(r.keys[0], r.integer, out.woken);
      if (!value) return notANumber("ADD", r.keys[0]);
      out.reply = reply.i64(*value).take();
      return out;
    }
    case Command::kCheck:
      out.reply = reply.u8(state.allExist(r.keys) ? kCheckReady : kCheckNotReady).take();
      return out;
    case Command::kWait:
      if (state.registerWait(connection, r.keys)) out.reply = reply.u8(kStopWaiting).take();
      return out;
    case Command::kGetNumKeys:
      out.reply = reply.i64(state.numKeys()).take();
      return out;
    case Command::kWatchKey:  // 1.13's callback API: acknowledged; the worker code we serve never relies on it
      out.reply = reply.u8(kWatchCallbackRegistered).take();
      return out;
    case Command::kDeleteKey:
      out.reply = reply.i64(state.deleteKey(r.keys[0]) ? 1 : 0).take();
      return out;
    case Command::kAppend:
      state.append(r.keys[0], r.values[0], out.woken);
      return out;
    case Command::kMultiGet:
      for (const auto& key : r.keys) {
        const std::string* value = state.find(key);
        reply.bytes(value ? *value : std::string());
      }
      out.reply = reply.take();
      return out;
    case Command::kMultiSet:
      for (size_t i = 0; i < r.keys.size(); ++i) state.set(r.keys[i], r.values[i], out.woken);
      return out;
    case Command::kCancelWait:
      // If the wake-up won the race, its STOP_WAITING byte is already queued before this reply; the
      // client reads both (TCPStore.cpp, doWait).
      state.cancelWait(connection);
      out.reply = reply.u8(kWaitCanceled).take();
      return out;
    case Command::kPing:
      out.reply = reply.u32(r.word).take();
      return out;
    case Command::kQueuePush:
      state.queuePush(r.keys[0], r.values[0], out.woken);
      return out;
    case Command::kQueuePop: {
      auto [size, value] = state.queuePop(r.keys[0]);
      reply.i64(size);
      if (size > 0) reply.bytes(value);
      out.reply = reply.take();
      return out;
    }
    case Command::kQueueLen:
      out.reply = reply.i64(state.queueLength(r.keys[0])).take();
      return out;
    case Command::kListKeys: {
      auto keys = state.listKeys();
      reply.i64(static_cast<int64_t>(keys.size()));
      for (const auto& key : keys) reply.bytes(key);
      out.reply = reply.take();
      return out;
    }
    case Command::kBarrier:
      if (!state.barrier(connection, r.keys[0], r.integer, out.woken)) return notANumber("BARRIER", r.keys[0]);
      return out;
  }
  return out;
}

}  // namespace ddprun::store
