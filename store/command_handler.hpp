#pragma once
// Meaning of each TCPStore request, apart from any I/O: request in, reply and woken waiters out.
// A reply whose size depends on the data (GET, MULTI_GET, COMPARE_SET, QUEUE_POP, LIST_KEYS) is sized
// before it is built and refused when it would exceed what the caller can afford; a request that would
// store more (SET, APPEND, ADD, MULTI_SET, QUEUE_PUSH, COMPARE_SET, BARRIER) is sized the same way against
// the room left in the memory budget and the limits on keys, values and queues. So no request sequence can
// make the store hold or allocate more than its limits allow.
#include <optional>
#include <string>

#include "store/kv_state.hpp"
#include "store/reply.hpp"
#include "store/request_parser.hpp"

namespace ddprun::store {

/// The most bytes a reply may take now, and the limit that sets it (for the log line when it is hit).
struct ReplyAllowance {
  uint64_t bytes = UINT64_MAX;
  const char* limit = "max-reply-bytes";
};

/// What one request may still use. The defaults are unlimited (the in-memory HashStore).
struct RequestBudget {
  ReplyAllowance reply;
  /// Bytes the stored data may still grow: the memory budget less what is stored and buffered now.
  uint64_t storeRoom = UINT64_MAX;
  /// Most keys and queues together (max-keys).
  uint64_t maxKeys = UINT64_MAX;
  /// Longest value an APPEND may make (max-value-bytes; SET's values are bounded by the parser).
  uint64_t maxValueBytes = UINT64_MAX;
  /// Most values one queue may hold (max-queue-length).
  uint64_t maxQueueLength = UINT64_MAX;
};

/// What the connection layer must do after one request.
struct HandlerOutcome {
  std::optional<Reply> reply;   ///< to send now (none for SET, a deferred WAIT, …)
  KvState::Woken woken;         ///< other (or this) connections to send STOP_WAITING
  std::string error;            ///< non-empty: log it and close this connection
  const char* limit = nullptr;  ///< the limit the request hit, when that is why `error` is set
};

/// Applies `request` from `connection` to `state` (its values are moved into the store, never copied). Errors (ADD on a
/// non-number, a reply or growth over `budget`) close the connection and change nothing, as PyTorch's servers close on
/// errors; client bytes in `error` are escaped for logging.
HandlerOutcome handleRequest(KvState& state, ConnectionId connection, Request request,
                             const RequestBudget& budget = {});

/// Whether `command` only reads (its one effect is the reply): a client that has gone is not served it.
bool onlyReads(Command command);

}  // namespace ddprun::store
