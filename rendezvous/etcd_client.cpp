#include "rendezvous/etcd_client.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/detail/base64.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "common/close_on_exec.hpp"
#include "rendezvous/rendezvous_backend.hpp"

namespace ddprun::rendezvous {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;
using nlohmann::json;

namespace {

// Answers are small (one state blob, a list of node keys); the cap only stops a broken peer from
// growing our memory without bound.
constexpr uint64_t kMaxAnswerBytes = 64ull * 1024 * 1024;
// gRPC status code NOT_FOUND, which the gateway puts in "code" (e.g. "requested lease not found").
constexpr int kGrpcNotFound = 5;

/// Why one request failed, before the operation's name is added.
struct CallFailure : std::runtime_error {
  CallFailure(const std::string& reason, bool connectionLost = false, int grpcCode = -1)
      : std::runtime_error(reason), connectionLost(connectionLost), grpcCode(grpcCode) {}
  bool connectionLost;  ///< the connection broke before any byte of an answer arrived
  int grpcCode;         ///< etcd's error code when etcd answered with an error, else -1
};

std::string base64Encode(const std::string& raw) {
  std::string out(beast::detail::base64::encoded_size(raw.size()), '\0');
  out.resize(beast::detail::base64::encode(out.data(), raw.data(), raw.size()));
  return out;
}

std::string base64Decode(const std::string& encoded) {
  std::string out(beast::detail::base64::decoded_size(encoded.size()) + 3, '\0');
  const auto [written, read] = beast::detail::base64::decode(out.data(), encoded.data(), encoded.size());
  // Decoding stops at the first '=' (padding) or at the first character outside the alphabet.
  if (encoded.find_first_not_of('=', read) != std::string::npos)
    throw CallFailure("etcd sent invalid base64: \"" + encoded.substr(0, 64) + "\"");
  out.resize(written);
  return out;
}

/// The smallest key greater than every key that starts with `prefix` (etcd's range_end for a prefix);
/// "\0" (every key) when no such key exists.
std::string prefixEnd(std::string prefix) {
  while (!prefix.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(prefix.back());
    if (last < 0xff) {
      ++last;
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');
}

/// An int64 field: the gateway writes them as strings and leaves out zero values (proto3 JSON).
int64_t int64Field(const json& object, const char* name) {
  const auto it = object.find(name);
  if (it == object.end() || it->is_null()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string()) {
    try {
      size_t used = 0;
      const int64_t value = std::stoll(it->get<std::string>(), &used);
      if (used == it->get_ref<const std::string&>().size()) return value;
    } catch (const std::logic_error&) {
    }
  }
  throw CallFailure(std::string("etcd sent a bad \"") + name + "\" field: " + it->dump());
}

std::string stringField(const json& object, const char* name) {
  const auto it = object.find(name);
  if (it == object.end() || it->is_null()) return "";
  if (!it->is_string()) throw CallFailure(std::string("etcd sent a bad \"") + name + "\" field: " + it->dump());
  return it->get<std::string>();
}

/// The first key-value of a range answer ({"kvs": [...]}), empty when there is none.
std::optional<EtcdKeyValue> firstKeyValue(const json& rangeAnswer) {
  const auto kvs = rangeAnswer.find("kvs");
  if (kvs == rangeAnswer.end() || !kvs->is_array() || kvs->empty()) return std::nullopt;
  const json& kv = kvs->front();
  return EtcdKeyValue{base64Decode(stringField(kv, "value")), int64Field(kv, "mod_revision"),
                      int64Field(kv, "create_revision")};
}

int64_t headerRevision(const json& answer) {
  const auto header = answer.find("header");
  return header == answer.end() ? 0 : int64Field(*header, "revision");
}

/// Runs one asynchronous operation to completion on `io` and returns its error. The operation's own
/// deadline (tcp_stream::expires_at) is what bounds the wait; io.run() returns once it completed.
template <class Start>
beast::error_code runToCompletion(asio::io_context& io, Start&& start) {
  beast::error_code result = asio::error::would_block;
  start([&result](beast::error_code ec, auto&&...) { result = ec; });
  io.restart();
  io.run();
  return result;
}

bool isConnectionLoss(const beast::error_code& ec) {
  return ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
         ec == asio::error::broken_pipe || ec == http::error::partial_message;
}

/// A network error as the end of a sentence: "connection refused", "no answer within 500 ms".
std::string networkReason(const beast::error_code& ec, std::chrono::milliseconds timeout) {
  if (ec == beast::error::timeout) return "no answer within " + std::to_string(timeout.count()) + " ms";
  if (isConnectionLoss(ec)) return "etcd closed the connection (" + ec.message() + ")";
  std::string reason = ec.message();
  if (!reason.empty()) reason[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(reason[0])));
  return reason;
}

/// etcd's error answer ({"error": ..., "message": ..., "code": n}) as a CallFailure.
CallFailure answerError(const json& answer, unsigned httpStatus) {
  const std::string message = answer.is_object() && answer.contains("message") && answer["message"].is_string()
                                  ? answer["message"].get<std::string>()
                                  : answer.dump().substr(0, 200);
  const int code = answer.is_object() && answer.contains("code") && answer["code"].is_number_integer()
                       ? answer["code"].get<int>()
                       : -1;
  return CallFailure(message + " (HTTP " + std::to_string(httpStatus) + ")", false, code);
}

/// Streaming endpoints (lease keepalive, watch) wrap each message in {"result": ...}.
json unwrapResult(json answer) {
  if (answer.is_object() && answer.contains("result") && answer["result"].is_object()) return answer["result"];
  return answer;
}

http::request<http::string_body> postRequest(const std::string& host, uint16_t port, const std::string& path,
                                             std::string body) {
  http::request<http::string_body> request{http::verb::post, path, 11};
  request.set(http::field::host, host + ":" + std::to_string(port));
  request.set(http::field::content_type, "application/json");
  request.keep_alive(true);
  request.body() = std::move(body);
  request.prepare_payload();
  return request;
}

/// What one message of a watch stream means: true (the key changed, or the watch was cancelled so it
/// may have), empty (creation acknowledgement or progress notice: keep waiting). Throws on an error.
std::optional<bool> watchMessageOutcome(const std::string& line, unsigned httpStatus) {
  const json message = json::parse(line, nullptr, false);
  if (message.is_discarded()) throw CallFailure("etcd sent an unreadable watch message: " + line.substr(0, 200));
  if (message.is_object() && message.contains("error")) throw answerError(message, httpStatus);
  const json result = unwrapResult(message);
  const auto events = result.find("events");
  if (events != result.end() && events->is_array() && !events->empty()) return true;
  if (result.value("canceled", false)) return true;
  return std::nullopt;
}

}  // namespace

EtcdClient::EtcdClient(std::string host, uint16_t port, std::chrono::milliseconds timeout)
    : host_(std::move(host)), port_(port), timeout_(timeout) {}

EtcdClient::~EtcdClient() = default;

std::string EtcdClient::describe() const { return "etcd-v3 at " + host_ + ":" + std::to_string(port_); }

void EtcdClient::fail(const std::string& operation, const std::string& reason) const {
  throw RendezvousBackendError(describe() + ": " + operation + " failed: " + reason);
}

// Adds the endpoint and the operation to any failure while calling etcd or reading its answer.
template <class Fn>
auto EtcdClient::guarded(const std::string& operation, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const CallFailure& failure) {
    fail(operation, failure.what());
  }
}

void EtcdClient::connect(beast::tcp_stream& stream, Clock::time_point deadline) {
  // Name resolution is bounded by the system resolver's own timeouts (resolv.conf), not by ours;
  // numeric addresses, the usual case, never reach it.
  tcp::resolver resolver(io_);
  beast::error_code ec;
  const auto endpoints = resolver.resolve(host_, std::to_string(port_), ec);
  if (ec) throw CallFailure("cannot resolve " + host_ + ": " + ec.message());
  for (const auto& entry : endpoints) {
    stream.close();
    stream.socket().open(entry.endpoint().protocol(), ec);
    if (ec) continue;
    closeOnExec(stream.socket().native_handle());
    stream.expires_at(deadline);
    ec = runToCompletion(io_, [&](auto handler) { stream.async_connect(entry.endpoint(), std::move(handler)); });
    if (!ec) return;
  }
  stream.close();
  throw CallFailure(networkReason(ec, timeout_));
}

json EtcdClient::callOnce(const std::string& path, const std::string& body, Clock::time_point deadline) {
  auto request = postRequest(host_, port_, path, body);
  unary_->expires_at(deadline);
  beast::error_code ec =
      runToCompletion(io_, [&](auto handler) { http::async_write(*unary_, request, std::move(handler)); });
  if (ec) throw CallFailure(networkReason(ec, timeout_), isConnectionLoss(ec));

  http::response_parser<http::string_body> parser;
  parser.body_limit(kMaxAnswerBytes);
  ec = runToCompletion(io_, [&](auto handler) { http::async_read(*unary_, unaryBuffer_, parser, std::move(handler)); });
  if (ec) throw CallFailure(networkReason(ec, timeout_), isConnectionLoss(ec) && !parser.got_some());

  const auto& response = parser.get();
  if (!response.keep_alive()) unary_.reset();
  const json answer = json::parse(response.body(), nullptr, false);
  if (answer.is_discarded()) {
    throw CallFailure("etcd sent an answer that is not JSON (HTTP " + std::to_string(response.result_int()) +
                      "): " + response.body().substr(0, 200));
  }
  if (response.result() != http::status::ok || (answer.is_object() && answer.contains("error"))) {
    throw answerError(answer, response.result_int());
  }
  return unwrapResult(answer);
}

json EtcdClient::call(const std::string& path, const json& body, Retry retry) {
  const auto deadline = Clock::now() + timeout_;
  const std::string text = body.dump();
  for (int attempt = 0;; ++attempt) {
    const bool reused = unary_ != nullptr;
    try {
      if (!unary_) {
        unaryBuffer_.clear();
        unary_ = std::make_unique<beast::tcp_stream>(io_);
        connect(*unary_, deadline);
      }
      return callOnce(path, text, deadline);
    } catch (const CallFailure& failure) {
      if (failure.grpcCode == -1) unary_.reset();  // a transport failure leaves the connection unusable
      // etcd (or something between) may close an idle kept-alive connection; that is no reason to fail.
      const bool staleConnection = reused && failure.connectionLost;
      if (!(staleConnection && retry == Retry::Safe && attempt == 0)) throw;
    }
  }
}

EtcdClient::Range EtcdClient::get(const std::string& key) {
  return guarded("range get of " + key, [&] {
    const json answer = call("/v3/kv/range", {{"key", base64Encode(key)}}, Retry::Safe);
    return Range{firstKeyValue(answer), headerRevision(answer)};
  });
}

std::vector<std::string> EtcdClient::keysWithPrefix(const std::string& prefix) {
  return guarded("prefix range of " + prefix, [&] {
    const json request{
        {"key", base64Encode(prefix)}, {"range_end", base64Encode(prefixEnd(prefix))}, {"keys_only", true}};
    const json answer = call("/v3/kv/range", request, Retry::Safe);
    std::vector<std::string> keys;
    const auto kvs = answer.find("kvs");
    if (kvs != answer.end() && kvs->is_array()) {
      for (const auto& kv : *kvs) keys.push_back(base64Decode(stringField(kv, "key")));
    }
    return keys;
  });
}

int64_t EtcdClient::put(const std::string& key, const std::string& value, int64_t lease) {
  return guarded("put of " + key, [&] {
    json request{{"key", base64Encode(key)}, {"value", base64Encode(value)}};
    if (lease != 0) request["lease"] = std::to_string(lease);
    // Writing the same value twice is harmless, so a put may be retried on a fresh connection.
    return headerRevision(call("/v3/kv/put", request, Retry::Safe));
  });
}

EtcdClient::Swap EtcdClient::compareAndSwap(const std::string& key, std::optional<int64_t> expectedModRevision,
                                            const std::string& value) {
  return guarded("compare-and-swap of " + key, [&] {
    const std::string encodedKey = base64Encode(key);
    json compare{{"key", encodedKey}, {"result", "EQUAL"}};
    if (expectedModRevision) {
      compare["target"] = "MOD";
      compare["mod_revision"] = std::to_string(*expectedModRevision);
    } else {
      compare["target"] = "CREATE";
      compare["create_revision"] = "0";
    }
    const json request{
        {"compare", json::array({compare})},
        {"success", json::array({{{"request_put", {{"key", encodedKey}, {"value", base64Encode(value)}}}}})},
        {"failure", json::array({{{"request_range", {{"key", encodedKey}}}}})}};
    // Never retried: a swap whose answer was lost may have been applied, and a second try would then
    // report the caller's own write as somebody else's.
    const json answer = call("/v3/kv/txn", request, Retry::Never);
    if (answer.value("succeeded", false)) {
      // The txn's header revision is the revision of its put.
      const int64_t revision = headerRevision(answer);
      return Swap{true, EtcdKeyValue{value, revision, revision}};
    }
    const auto responses = answer.find("responses");
    if (responses == answer.end() || !responses->is_array() || responses->empty() ||
        !responses->front().contains("response_range")) {
      throw CallFailure("etcd's failed txn answer has no range response: " + answer.dump().substr(0, 200));
    }
    return Swap{false, firstKeyValue(responses->front()["response_range"])};
  });
}

void EtcdClient::remove(const std::string& key) {
  guarded("delete of " + key, [&] { call("/v3/kv/deleterange", {{"key", base64Encode(key)}}, Retry::Safe); });
}

int64_t EtcdClient::grantLease(std::chrono::seconds ttl) {
  return guarded("lease grant", [&] {
    // Retrying is harmless: a duplicate grant only leaves an unused lease that expires by itself.
    const json answer = call("/v3/lease/grant", {{"TTL", std::to_string(ttl.count())}}, Retry::Safe);
    const int64_t id = int64Field(answer, "ID");
    if (id == 0) throw CallFailure("etcd granted no lease: " + answer.dump().substr(0, 200));
    return id;
  });
}

int64_t EtcdClient::keepAliveLease(int64_t id) {
  return guarded("lease keepalive", [&] {
    // An unknown lease is answered with HTTP 200 and no TTL (0), not with an error.
    return int64Field(call("/v3/lease/keepalive", {{"ID", std::to_string(id)}}, Retry::Safe), "TTL");
  });
}

void EtcdClient::revokeLease(int64_t id) {
  guarded("lease revoke", [&] {
    try {
      call("/v3/lease/revoke", {{"ID", std::to_string(id)}}, Retry::Safe);
    } catch (const CallFailure& failure) {
      if (failure.grpcCode != kGrpcNotFound) throw;
    }
  });
}

bool EtcdClient::watch(const std::string& key, int64_t fromRevision, std::chrono::milliseconds wait) {
  return guarded("watch of " + key, [&] {
    const auto start = Clock::now();
    beast::tcp_stream stream(io_);  // closed when this call returns, which ends the watch on etcd's side
    connect(stream, start + timeout_);
    const json body{{"create_request", {{"key", base64Encode(key)}, {"start_revision", std::to_string(fromRevision)}}}};
    auto request = postRequest(host_, port_, "/v3/watch", body.dump());
    stream.expires_at(start + timeout_);
    beast::error_code ec =
        runToCompletion(io_, [&](auto handler) { http::async_write(stream, request, std::move(handler)); });
    if (ec) throw CallFailure(networkReason(ec, timeout_));

    // The answer is one endless chunked body of newline-delimited JSON messages; chunk boundaries need
    // not match message boundaries, so bytes are collected and cut at newlines.
    std::string pending;
    auto collect = [&pending](uint64_t, beast::string_view data, beast::error_code& chunkEc) {
      if (pending.size() + data.size() > kMaxAnswerBytes) chunkEc = http::error::body_limit;
      pending.append(data.data(), data.size());
      return data.size();
    };
    http::response_parser<http::string_body> parser;
    parser.body_limit(boost::none);  // the stream has no end; `collect` caps what is kept
    parser.on_chunk_body(collect);
    beast::flat_buffer buffer;
    stream.expires_at(start + wait);
    for (;;) {
      ec = runToCompletion(io_,
                           [&](auto handler) { http::async_read_some(stream, buffer, parser, std::move(handler)); });
      for (size_t newline; (newline = pending.find('\n')) != std::string::npos;) {
        const std::string line = pending.substr(0, newline);
        pending.erase(0, newline + 1);
        if (line.find_first_not_of(" \r\t") == std::string::npos) continue;
        const unsigned status = parser.is_header_done() ? parser.get().result_int() : 200;
        if (const auto outcome = watchMessageOutcome(line, status)) return *outcome;
      }
      if (ec == beast::error::timeout) return false;
      if (ec) throw CallFailure(networkReason(ec, timeout_));
      if (parser.is_header_done() && parser.get().result() != http::status::ok) {
        if (!parser.is_done()) continue;  // read the whole error answer first
        const std::string& text = parser.get().body().empty() ? pending : parser.get().body();
        const json answer = json::parse(text, nullptr, false);
        throw answerError(answer, parser.get().result_int());
      }
      if (parser.is_done()) throw CallFailure("etcd ended the watch stream without an event");
    }
  });
}

}  // namespace ddprun::rendezvous
