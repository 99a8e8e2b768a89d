#pragma once
// One client connection of the status server: reads requests with bounded headers and body, answers
// each through StatusServer::answer, keeps the connection alive between requests for a bounded idle
// time, and drops a client that misses a deadline (Beast's tcp_stream timeouts close the socket).
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string_view>

namespace ddprun::status {

class StatusServer;

class HttpConnection : public std::enable_shared_from_this<HttpConnection> {
 public:
  HttpConnection(boost::asio::ip::tcp::socket socket, uint64_t id, StatusServer& server);

  /// Starts reading the first request; it must arrive within the request timeout.
  void start();
  /// Closes the socket at once and tells the server; idempotent. Pending handlers then do nothing.
  void close();

  uint64_t id() const { return id_; }
  /// True while waiting for (or reading) a request, false while writing a response.
  bool waiting() const { return !writing_; }
  /// When the current wait for a request began.
  std::chrono::steady_clock::time_point waitingSince() const { return waitingSince_; }

 private:
  using Request = boost::beast::http::request<boost::beast::http::string_body>;
  using Response = boost::beast::http::response<boost::beast::http::string_body>;

  void readRequest();
  /// Between keep-alive requests: waits up to the idle timeout for the next request's first bytes.
  void awaitNextRequest();
  void onReadError(const boost::beast::error_code& ec);
  void answer(const Request& request);
  /// Answers an unreadable request with `status` and closes.
  void reject(unsigned status, std::string_view message);
  void write(bool keepAlive);
  /// After the last response: half-closes, then discards what the client still sends for up to a
  /// second, so the kernel does not reset the connection before the client has read the response.
  void finish();
  void drain();

  boost::beast::tcp_stream stream_;
  uint64_t id_;
  StatusServer& server_;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  Response response_;
  bool writing_ = false;
  bool closed_ = false;
  std::chrono::steady_clock::time_point waitingSince_ = std::chrono::steady_clock::now();
};

}  // namespace ddprun::status
