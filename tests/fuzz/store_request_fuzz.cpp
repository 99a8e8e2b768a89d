// libFuzzer target for the store's request parser and command handler (tests/fuzz/run_fuzz.sh builds it
// with clang; store_fuzz_replay_test replays the corpus and every kept crash through the same function).
// Input: one mode byte (bit 0: dialect, 1 = torch 2.x; the rest seeds the split), then a byte stream as a
// client would send it. The stream is parsed and handled whole, then parsed again in pieces of varying
// size; the two must decode the same requests and end the same way (the parser resumes exactly where a
// feed stopped), every reply must stay within its allowance, buffered bytes within the request cap, and what
// the state holds within tiny storage limits (bytes, keys, value length, queue length), whatever the requests.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "store/command_handler.hpp"
#include "store/kv_state.hpp"
#include "store/request_parser.hpp"

namespace {
using ddprun::store::Dialect;
using ddprun::store::Request;
using ddprun::store::RequestParser;
using ddprun::store::StoreLimits;

StoreLimits fuzzLimits() {
  StoreLimits limits;
  limits.maxKeyBytes = 64;
  limits.maxValueBytes = 512;
  limits.maxKeysPerRequest = 32;
  limits.maxRequestBytes = 4096;
  limits.maxReplyBytes = 8192;
  limits.memoryBudgetBytes = 4096;
  limits.maxKeys = 8;
  limits.maxQueueLength = 4;
  return limits;
}

[[noreturn]] void fail() { __builtin_trap(); }

struct Outcome {
  std::vector<Request> requests;
  RequestParser::Status end = RequestParser::Status::kNeedMore;
};

bool same(const Request& a, const Request& b) {
  return a.command == b.command && a.keys == b.keys && a.values == b.values && a.integer == b.integer &&
         a.word == b.word;
}

/// Feeds `stream` in pieces of `piece(i)` bytes; stops at the first bad request.
template <typename Piece>
Outcome parse(std::string_view stream, Dialect dialect, const StoreLimits& limits, Piece piece) {
  Outcome out;
  RequestParser parser(dialect, limits);
  size_t pos = 0;
  for (size_t i = 0; pos < stream.size(); ++i) {
    const size_t end = std::min(stream.size(), pos + piece(i));
    while (pos < end) {
      size_t consumed = 0;
      out.end = parser.feed(stream.substr(pos, end - pos), consumed);
      if (consumed == 0 && out.end != RequestParser::Status::kBad) fail();  // no progress
      pos += consumed;
      if (parser.bufferedBytes() > limits.maxRequestBytes + 64 * (2 * limits.maxKeysPerRequest + 4)) fail();
      if (out.end == RequestParser::Status::kBad) return out;
      if (out.end == RequestParser::Status::kOk) out.requests.push_back(parser.takeRequest());
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const Dialect dialect = (data[0] & 1) ? Dialect::kTorch2 : Dialect::kTorch113;
  const unsigned seed = data[0] >> 1;
  const std::string_view stream(reinterpret_cast<const char*>(data + 1), size - 1);
  const StoreLimits limits = fuzzLimits();

  const Outcome whole = parse(stream, dialect, limits, [&](size_t) { return stream.size(); });
  const Outcome pieces = parse(stream, dialect, limits, [&](size_t i) { return 1 + (seed * 7 + i * 13) % 17; });
  if (whole.end != pieces.end || whole.requests.size() != pieces.requests.size()) fail();
  for (size_t i = 0; i < whole.requests.size(); ++i) {
    if (!same(whole.requests[i], pieces.requests[i])) fail();
  }

  // Apply the requests from two connections in turn, as the server would, with tiny storage limits.
  ddprun::store::KvState state;
  ddprun::store::RequestBudget budget;
  budget.reply = ddprun::store::ReplyAllowance{limits.maxReplyBytes, "max-reply-bytes"};
  budget.maxKeys = limits.maxKeys;
  budget.maxValueBytes = limits.maxValueBytes;
  budget.maxQueueLength = limits.maxQueueLength;
  for (size_t i = 0; i < whole.requests.size(); ++i) {
    const auto& request = whole.requests[i];
    budget.storeRoom =
        limits.memoryBudgetBytes > state.storedBytes() ? limits.memoryBudgetBytes - state.storedBytes() : 0;
    auto outcome = ddprun::store::handleRequest(state, 1 + i % 2, request, budget);
    if (outcome.reply && outcome.reply->size() > budget.reply.bytes) fail();
    if (outcome.reply && outcome.reply->flatten().size() != outcome.reply->size()) fail();
    if (!outcome.error.empty()) state.cancelWait(1 + i % 2);  // the server closes that connection
    if (state.storedBytes() > limits.memoryBudgetBytes) fail();
    if (state.keyCount() > limits.maxKeys) fail();
    for (const auto& key : request.keys) {
      if (const std::string* value = state.find(key); value && value->size() > limits.maxValueBytes) fail();
      if (static_cast<uint64_t>(state.queueLength(key)) > limits.maxQueueLength) fail();
    }
  }
  state.cancelWait(1);
  state.cancelWait(2);
  if (state.waitingConnections() != 0) fail();
  return 0;
}
