#include "store/command_handler.hpp"

#include <unordered_set>

#include "store/log_text.hpp"

namespace ddprun::store {
namespace {

constexpr uint64_t kLengthBytes = 8;    // every value in a reply is preceded by its uint64 length
constexpr uint64_t kIntegerBytes = 20;  // the longest decimal int64 ADD or BARRIER stores

uint64_t storedSize(const KvState& state, const std::string& key) {
  const std::string* value = state.find(key);
  return value == nullptr ? 0 : value->size();
}

/// The reply size of a request whose reply depends on the data; 0 for the fixed-size ones.
uint64_t replySize(const KvState& state, const Request& r) {
  switch (r.command) {
    case Command::kGet: return kLengthBytes + storedSize(state, r.keys[0]);
    case Command::kCompareSet:  // at most the larger of what is stored and what is sent
      return kLengthBytes +
             std::max<uint64_t>(storedSize(state, r.keys[0]), std::max(r.values[0].size(), r.values[1].size()));
    case Command::kMultiGet: {
      uint64_t total = 0;
      for (const auto& key : r.keys) total += kLengthBytes + storedSize(state, key);
      return total;
    }
    case Command::kListKeys:
      return kLengthBytes + static_cast<uint64_t>(state.numKeys()) * kLengthBytes + state.keyBytes();
    case Command::kQueuePop: return 2 * kLengthBytes + state.queueFrontSize(r.keys[0]);
    default: return 0;
  }
}

/// How much a request could add to what the store holds: bytes (an upper bound) and new keys.
struct Growth {
  uint64_t bytes = 0;
  uint64_t newKeys = 0;
};

/// Growth of storing `size` bytes at `key` (SET, COMPARE_SET, ADD): a new key costs its name and overhead.
Growth storing(const KvState& state, const std::string& key, uint64_t size) {
  if (const std::string* old = state.find(key)) return {size > old->size() ? size - old->size() : 0, 0};
  return {key.size() + kEntryOverheadBytes + size, 1};
}

Growth growthOf(const KvState& state, const Request& r) {
  switch (r.command) {
    case Command::kSet: return storing(state, r.keys[0], r.values[0].size());
    case Command::kCompareSet: return storing(state, r.keys[0], r.values[1].size());
    case Command::kAdd:
    case Command::kBarrier: return storing(state, r.keys[0], kIntegerBytes);
    case Command::kAppend:
      if (state.hasValue(r.keys[0])) return {r.values[0].size(), 0};
      return {r.keys[0].size() + kEntryOverheadBytes + r.values[0].size(), 1};
    case Command::kMultiSet: {
      Growth total;
      std::unordered_set<std::string_view> added;  // a key set twice in one request is one new key
      for (size_t i = 0; i < r.keys.size(); ++i) {
        const Growth one = storing(state, r.keys[i], r.values[i].size());
        total.bytes += one.bytes;
        if (one.newKeys > 0 && added.insert(r.keys[i]).second) ++total.newKeys;
      }
      return total;
    }
    case Command::kQueuePush: {
      const bool added = !state.hasQueue(r.keys[0]);
      return {r.values[0].size() + kQueueItemOverheadBytes + (added ? r.keys[0].size() + kEntryOverheadBytes : 0),
              added ? 1u : 0u};
    }
    default: return {};
  }
}

HandlerOutcome refused(const char* limit, std::string error) {
  HandlerOutcome out;
  out.error = std::move(error);
  out.limit = limit;
  return out;
}

/// The refusal of a request that would take the store past one of its storage limits; nullopt when it fits.
std::optional<HandlerOutcome> checkStorage(const KvState& state, const Request& r, const RequestBudget& budget) {
  const Growth growth = growthOf(state, r);
  const std::string name = commandName(r.command);
  if (growth.bytes > budget.storeRoom) {
    return refused("memory-budget-bytes", name + " would store " + std::to_string(growth.bytes) +
                                              " more bytes, over the " + std::to_string(budget.storeRoom) +
                                              " bytes left in the store's budget");
  }
  if (growth.newKeys > 0 && state.keyCount() + growth.newKeys > budget.maxKeys) {
    return refused("max-keys", name + " would add a key to the " + std::to_string(state.keyCount()) +
                                   " the store holds, its limit");
  }
  if (r.command == Command::kAppend && storedSize(state, r.keys[0]) + r.values[0].size() > budget.maxValueBytes) {
    return refused("max-value-bytes", "APPEND would make the value of '" + escapeForLog(r.keys[0]) + "' " +
                                          std::to_string(storedSize(state, r.keys[0]) + r.values[0].size()) +
                                          " bytes long, over the " + std::to_string(budget.maxValueBytes) +
                                          " bytes allowed");
  }
  if (r.command == Command::kQueuePush &&
      static_cast<uint64_t>(state.queueLength(r.keys[0])) >= budget.maxQueueLength) {
    return refused("max-queue-length", "QUEUE_PUSH onto '" + escapeForLog(r.keys[0]) + "', which holds " +
                                           std::to_string(state.queueLength(r.keys[0])) + " values, its limit");
  }
  return std::nullopt;
}

HandlerOutcome notANumber(const char* command, const std::string& key) {
  HandlerOutcome out;
  out.error = std::string(command) + " on key '" + escapeForLog(key) +
              "' whose value is not a decimal integer, or would leave the 64-bit range";
  return out;
}

}  // namespace

bool onlyReads(Command command) {
  switch (command) {
    case Command::kGet:
    case Command::kCheck:
    case Command::kWait:
    case Command::kGetNumKeys:
    case Command::kWatchKey:
    case Command::kMultiGet:
    case Command::kCancelWait:
    case Command::kPing:
    case Command::kQueueLen:
    case Command::kListKeys: return true;
    default: return false;
  }
}

HandlerOutcome handleRequest(KvState& state, ConnectionId connection, Request r, const RequestBudget& budget) {
  HandlerOutcome out;
  if (const uint64_t size = replySize(state, r); size > budget.reply.bytes) {
    return refused(budget.reply.limit, std::string(commandName(r.command)) + " would need a reply of " +
                                           std::to_string(size) + " bytes, over the " +
                                           std::to_string(budget.reply.bytes) + " bytes allowed");
  }
  if (auto refusal = checkStorage(state, r, budget)) return std::move(*refusal);
  Reply reply;
  switch (r.command) {
    case Command::kValidate:  // checked by the connection on the first request; later ones are ignored
      return out;
    case Command::kSet: state.set(r.keys[0], std::move(r.values[0]), out.woken); return out;
    case Command::kCompareSet:
      out.reply = std::move(
          reply.value(state.compareSet(r.keys[0], std::move(r.values[0]), std::move(r.values[1]), out.woken)));
      return out;
    case Command::kGet:
      // Clients WAIT before GET, so a missing key is rare; answer empty as the libuv server does. The value is
      // shared with the reply, not copied.
      out.reply = std::move(reply.value(state.share(r.keys[0])));
      return out;
    case Command::kAdd: {
      auto value = state.add(r.keys[0], r.integer, out.woken);
      if (!value) return notANumber("ADD", r.keys[0]);
      out.reply = std::move(reply.i64(*value));
      return out;
    }
    case Command::kCheck:
      out.reply = std::move(reply.u8(state.allExist(r.keys) ? kCheckReady : kCheckNotReady));
      return out;
    case Command::kWait:
      if (state.registerWait(connection, r.keys)) out.reply = std::move(reply.u8(kStopWaiting));
      return out;
    case Command::kGetNumKeys: out.reply = std::move(reply.i64(state.numKeys())); return out;
    case Command::kWatchKey:  // 1.13's callback API: acknowledged; the worker code we serve never relies on it
      out.reply = std::move(reply.u8(kWatchCallbackRegistered));
      return out;
    case Command::kDeleteKey: out.reply = std::move(reply.i64(state.deleteKey(r.keys[0]) ? 1 : 0)); return out;
    case Command::kAppend: state.append(r.keys[0], r.values[0], out.woken); return out;
    case Command::kMultiGet:
      for (const auto& key : r.keys) reply.value(state.share(key));
      out.reply = std::move(reply);
      return out;
    case Command::kMultiSet:
      for (size_t i = 0; i < r.keys.size(); ++i) state.set(r.keys[i], std::move(r.values[i]), out.woken);
      return out;
    case Command::kCancelWait:
      // If the wake-up won the race, its STOP_WAITING byte is already queued before this reply; the
      // client reads both (TCPStore.cpp, doWait).
      state.cancelWait(connection);
      out.reply = std::move(reply.u8(kWaitCanceled));
      return out;
    case Command::kPing: out.reply = std::move(reply.u32(r.word)); return out;
    case Command::kQueuePush: state.queuePush(r.keys[0], std::move(r.values[0]), out.woken); return out;
    case Command::kQueuePop: {
      auto [size, value] = state.queuePop(r.keys[0]);
      reply.i64(size);
      if (size > 0) reply.bytes(value);
      out.reply = std::move(reply);
      return out;
    }
    case Command::kQueueLen: out.reply = std::move(reply.i64(state.queueLength(r.keys[0]))); return out;
    case Command::kListKeys: {
      auto keys = state.listKeys();
      reply.i64(static_cast<int64_t>(keys.size()));
      for (const auto& key : keys) reply.bytes(key);
      out.reply = std::move(reply);
      return out;
    }
    case Command::kBarrier:
      if (!state.barrier(connection, r.keys[0], r.integer, out.woken)) return notANumber("BARRIER", r.keys[0]);
      return out;
  }
  return out;
}

}  // namespace ddprun::store
