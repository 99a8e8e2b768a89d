#pragma once
// Meaning of each TCPStore request, apart from any I/O: request in, reply bytes and woken waiters out.
// A reply whose size depends on the data (GET, MULTI_GET, COMPARE_SET, QUEUE_POP, LIST_KEYS) is sized
// before it is built and refused when it would exceed what the caller can afford, so one request can
// never make the store allocate more than its limits allow.
#include <optional>
#include <string>

#include "store/kv_state.hpp"
#include "store/request_parser.hpp"

namespace ddprun::store {

/// The most bytes a reply may take now, and the limit that sets it (for the log line when it is hit).
struct ReplyAllowance {
  uint64_t bytes = UINT64_MAX;
  const char* limit = "max-reply-bytes";
};

/// What the connection layer must do after one request.
struct HandlerOutcome {
  std::optional<std::string> reply;  ///< bytes to send now (none for SET, a deferred WAIT, …)
  KvState::Woken woken;              ///< other (or this) connections to send STOP_WAITING
  std::string error;                 ///< non-empty: log it and close this connection
  const char* limit = nullptr;       ///< the limit the request hit, when that is why `error` is set
};

/// Applies `request` from `connection` to `state`. Errors (ADD on a non-number, a reply over `allowance`)
/// close the connection, as PyTorch's servers do; client bytes in `error` are escaped for logging.
HandlerOutcome handleRequest(KvState& state, ConnectionId connection, const Request& request,
                             const ReplyAllowance& allowance = {});

/// Replies are encoded like requests.
using ReplyWriter = WireWriter;

}  // namespace ddprun::store
