#include "launcher/status/http_connection.hpp"

#include <spdlog/spdlog.h>

#include "launcher/status/status_server.hpp"

namespace ddprun::status {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;

namespace {
std::string_view view(beast::string_view s) { return {s.data(), s.size()}; }

constexpr std::chrono::seconds kDrainTime{1};
constexpr size_t kChunkBytes = 4096;
}  // namespace

HttpConnection::HttpConnection(tcp::socket socket, uint64_t id, StatusServer& server)
    // The buffer holds at most one request's header and body, plus a chunk of what follows it.
    : stream_(std::move(socket)),
      id_(id),
      server_(server),
      buffer_(server.options().maxHeaderBytes + server.options().maxBodyBytes + kChunkBytes) {
  beast::error_code ec;
  stream_.socket().set_option(tcp::no_delay(true), ec);
}

void HttpConnection::start() {
  stream_.expires_after(server_.options().requestTimeout);
  readRequest();
}

void HttpConnection::readRequest() {
  parser_.emplace();
  parser_->header_limit(server_.options().maxHeaderBytes);
  parser_->body_limit(server_.options().maxBodyBytes);
  http::async_read(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
    if (self->closed_) return;
    if (ec) return self->onReadError(ec);
    self->answer(self->parser_->get());
  });
}

void HttpConnection::awaitNextRequest() {
  waitingSince_ = std::chrono::steady_clock::now();
  if (buffer_.size() > 0) {  // a pipelined request is already here
    stream_.expires_after(server_.options().requestTimeout);
    return readRequest();
  }
  stream_.expires_after(server_.options().idleTimeout);
  stream_.async_read_some(buffer_.prepare(kChunkBytes), [self = shared_from_this()](beast::error_code ec, size_t n) {
    if (self->closed_) return;
    if (ec) return self->close();  // idle timeout, or the client went away
    self->buffer_.commit(n);
    self->stream_.expires_after(self->server_.options().requestTimeout);
    self->readRequest();
  });
}

void HttpConnection::onReadError(const beast::error_code& ec) {
  const StatusServerOptions& limits = server_.options();
  if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
    return reject(431,
                  "request header fields too large: the limit is " + std::to_string(limits.maxHeaderBytes) + " bytes");
  }
  if (ec == http::error::body_limit) {
    return reject(413, "request body too large: the limit is " + std::to_string(limits.maxBodyBytes) + " bytes");
  }
  // A broken message is answered; a timeout or a vanished client only closes (nobody would read it).
  const bool httpError = ec.category() == http::make_error_code(http::error::bad_method).category();
  if (httpError && ec != http::error::end_of_stream && ec != http::error::partial_message) {
    return reject(400, "bad request: " + ec.message());
  }
  if (ec == beast::error::timeout) spdlog::debug("status page: dropped a client that missed the request deadline");
  close();
}

void HttpConnection::answer(const Request& request) {
  StatusResponse answer = server_.answer(view(request.method_string()), view(request.target()));
  response_ = Response(static_cast<http::status>(answer.status), request.version());
  response_.set(http::field::content_type, answer.contentType);
  response_.set(http::field::cache_control, "no-store");
  if (!answer.allow.empty()) response_.set(http::field::allow, answer.allow);
  response_.keep_alive(request.keep_alive());
  response_.content_length(answer.body.size());  // HEAD: the length of what GET would send, and no body
  if (request.method() != http::verb::head) response_.body() = std::move(answer.body);
  write(request.keep_alive());
}

void HttpConnection::reject(unsigned status, std::string_view message) {
  response_ = Response(static_cast<http::status>(status), 11);
  response_.set(http::field::content_type, "text/plain; charset=utf-8");
  response_.keep_alive(false);
  response_.body() = std::string(message) + "\n";
  response_.prepare_payload();
  write(false);
}

void HttpConnection::write(bool keepAlive) {
  writing_ = true;
  http::async_write(stream_, response_, [self = shared_from_this(), keepAlive](beast::error_code ec, size_t) {
    if (self->closed_) return;
    self->writing_ = false;
    if (ec) return self->close();
    if (keepAlive) return self->awaitNextRequest();
    self->finish();
  });
}

void HttpConnection::finish() {
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  if (ec) return close();
  buffer_.clear();
  stream_.expires_after(kDrainTime);
  drain();
}

void HttpConnection::drain() {
  stream_.async_read_some(buffer_.prepare(kChunkBytes), [self = shared_from_this()](beast::error_code ec, size_t) {
    if (self->closed_) return;
    if (ec) return self->close();  // the client closed its side too (or the drain time is over)
    self->drain();
  });
}

void HttpConnection::close() {
  if (closed_) return;
  closed_ = true;
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_.close();
  server_.connectionClosed(id_);
}

}  // namespace ddprun::status
