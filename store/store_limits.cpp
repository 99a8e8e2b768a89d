#include "store/store_limits.hpp"

namespace ddprun::store {

const std::vector<LimitField>& limitFields() {
  static const std::vector<LimitField> fields{
      {"max-key-bytes", "longest key, in bytes", &StoreLimits::maxKeyBytes},
      {"max-value-bytes", "longest value, in bytes (also what APPEND may make)", &StoreLimits::maxValueBytes},
      {"max-keys-per-request", "most keys in one CHECK, WAIT, MULTI_GET or MULTI_SET", &StoreLimits::maxKeysPerRequest},
      {"max-request-bytes", "largest request, in bytes (all its keys and values)", &StoreLimits::maxRequestBytes},
      {"max-key-list-bytes", "largest CHECK, WAIT or MULTI_GET (keys only), in bytes", &StoreLimits::maxKeyListBytes},
      {"max-reply-bytes", "largest reply, in bytes (sized before it is built)", &StoreLimits::maxReplyBytes},
      {"max-pending-reply-bytes", "most unread reply bytes one connection may leave",
       &StoreLimits::maxPendingReplyBytes},
      {"memory-budget-bytes",
       "everything the store holds, in bytes: stored keys, values and queues, and every connection's buffers "
       "(unsent replies, partial requests); a request or connection that would exceed it is refused and closed",
       &StoreLimits::memoryBudgetBytes},
      {"max-keys", "most keys (and queues) stored at once", &StoreLimits::maxKeys},
      {"max-queue-length", "most values waiting in one queue", &StoreLimits::maxQueueLength},
      {"request-timeout-ms",
       "milliseconds a connection may sit inside one incomplete request; connections idle between requests are "
       "never closed",
       &StoreLimits::requestTimeoutMs},
      {"reply-timeout-ms",
       "milliseconds a connection may leave its replies unread (taking none of their bytes) before it is closed",
       &StoreLimits::replyTimeoutMs},
      {"turn-bytes", "bytes of requests and replies served to one connection before the others get a turn",
       &StoreLimits::turnBytes},
  };
  return fields;
}

}  // namespace ddprun::store
