#pragma once
// Every bound the store server keeps, named once. Each has a default chosen for a training job (worker
// counts in the tens of thousands, values of at most a few MiB) and a ddprun-store flag of the same name.
// A client that hits a limit loses its connection only, with one log line naming the limit and the peer;
// the store and every other client go on. The defaults sit between torch's libuv server (key 8 KiB, value
// 8 MiB, 128 Ki keys per request: TCPStoreLibUvBackend.cpp) and its legacy server (no limits).
#include <cstdint>
#include <vector>

namespace ddprun::store {

struct StoreLimits {
  /// Longest key (bytes). --max-key-bytes
  uint64_t maxKeyBytes = 64 * 1024;
  /// Longest value (bytes), also what APPEND may make. --max-value-bytes
  uint64_t maxValueBytes = 64ull * 1024 * 1024;
  /// Most keys in one CHECK, WAIT, MULTI_GET or MULTI_SET. --max-keys-per-request
  uint64_t maxKeysPerRequest = 128 * 1024;
  /// Largest request on the wire (bytes), all of its keys and values together. --max-request-bytes
  uint64_t maxRequestBytes = 128ull * 1024 * 1024;
  /// Largest key-only request (CHECK, WAIT, MULTI_GET: all its keys and their lengths, in bytes). Lower than
  /// max-request-bytes because such a request carries no values: 128 Ki keys of 64 bytes fit, and a client
  /// streaming an endless key list is cut off before the buffer it fills costs the other clients time.
  /// --max-key-list-bytes
  uint64_t maxKeyListBytes = 8ull * 1024 * 1024;
  /// Largest reply (bytes): sized before it is built (MULTI_GET, LIST_KEYS, GET). --max-reply-bytes
  uint64_t maxReplyBytes = 128ull * 1024 * 1024;
  /// Most reply bytes one connection may leave unread. --max-pending-reply-bytes
  uint64_t maxPendingReplyBytes = 256ull * 1024 * 1024;
  /// Everything the store holds, in bytes: stored keys, values and queued values (with a per-entry overhead,
  /// kv_state.hpp) and all connections' buffers (unsent replies, partial requests, unprocessed input). A request
  /// that would store more than the room left is refused, and a connection whose buffers would take the total
  /// over it is closed. --memory-budget-bytes
  uint64_t memoryBudgetBytes = 1024ull * 1024 * 1024;
  /// Most keys (and queues) stored at once. --max-keys
  uint64_t maxKeys = 4ull * 1024 * 1024;
  /// Most values waiting in one queue. --max-queue-length
  uint64_t maxQueueLength = 1024 * 1024;
  /// How long a connection may sit inside one incomplete request (milliseconds). A connection idle between
  /// requests (a worker between barriers) is never closed. --request-timeout-ms
  uint64_t requestTimeoutMs = 30 * 1000;
  /// How long a connection may leave its replies unread, taking none of their bytes (milliseconds); then it
  /// is closed and they are released. --reply-timeout-ms
  uint64_t replyTimeoutMs = 30 * 1000;
  /// Bytes of requests and replies one connection is served per turn of the event loop before the others
  /// get theirs (fairness; at least one request per turn). --turn-bytes
  uint64_t turnBytes = 256 * 1024;
};

/// One limit as a flag: its name (the flag without "--", also used in log lines), its help text and its field.
struct LimitField {
  const char* name;
  const char* help;
  uint64_t StoreLimits::*field;
};

/// Every limit of StoreLimits, in declaration order.
const std::vector<LimitField>& limitFields();

}  // namespace ddprun::store
