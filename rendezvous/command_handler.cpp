#include "rendezvous/command_handler.hpp"

namespace ddprun::rendezvous {

HandlerOutcome handleRequest(KvState& state, SessionId session, const Request& r) {
  HandlerOutcome out;
  ReplyWriter reply;
  switch (r.command) {
    case Command::kValidate:  // checked by the session on the first request; later ones are ignored
      return out;
    case Command::kSet:
      state.set(r.keys[0], r.values[0], out.woken);
      return out;
    case Command::kCompareSet:
      out.reply = reply.bytes(state.compareSet(r.keys[0], r.values[0], r.values[1], out.woken)).take();
      return out;
    case Command::kGet:
      // Clients WAIT before GET, so a missing key is rare; answer empty as the libuv server does.
      out.reply = reply.bytes(state.get(r.keys[0]).value_or("")).take();
      return out;
    case Command::kAdd: {
      auto value = state.add(r.keys[0], r.integer, out.woken);
      if (!value) {
        out.error = "ADD on key '" + r.keys[0] + "' whose value is not a decimal integer";
        return out;
      }
      out.reply = reply.i64(*value).take();
      return out;
    }
    case Command::kCheck:
      out.reply = reply.u8(state.allExist(r.keys) ? kCheckReady : kCheckNotReady).take();
      return out;
    case Command::kWait:
      if (state.registerWait(session, r.keys)) out.reply = reply.u8(kStopWaiting).take();
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
      for (const auto& key : r.keys) reply.bytes(state.get(key).value_or(""));
      out.reply = reply.take();
      return out;
    case Command::kMultiSet:
      for (size_t i = 0; i < r.keys.size(); ++i) state.set(r.keys[i], r.values[i], out.woken);
      return out;
    case Command::kCancelWait:
      // If the wake-up won the race, its STOP_WAITING byte is already queued before this reply; the
      // client reads both (TCPStore.cpp, doWait).
      state.cancelWait(session);
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
      if (!state.barrier(session, r.keys[0], r.integer, out.woken)) {
        out.error = "BARRIER on key '" + r.keys[0] + "' whose value is not a decimal integer";
      }
      return out;
  }
  return out;
}

}  // namespace ddprun::rendezvous
