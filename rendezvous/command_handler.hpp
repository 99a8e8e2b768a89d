#pragma once
// Meaning of each TCPStore request, apart from any I/O: request in, reply bytes and woken waiters out.
#include <optional>
#include <string>

#include "rendezvous/kv_state.hpp"
#include "rendezvous/request_parser.hpp"

namespace ddprun::rendezvous {

/// What the session layer must do after one request.
struct HandlerOutcome {
  std::optional<std::string> reply;  ///< bytes to send now (none for SET, a deferred WAIT, …)
  KvState::Woken woken;              ///< other (or this) sessions to send STOP_WAITING
  std::string error;                 ///< non-empty: log it and close this connection
};

/// Applies `request` from `session` to `state`. Errors (ADD on a non-number, …) close the connection,
/// as PyTorch's servers do.
HandlerOutcome handleRequest(KvState& state, SessionId session, const Request& request);

/// Replies are encoded like requests.
using ReplyWriter = WireWriter;

}  // namespace ddprun::rendezvous
