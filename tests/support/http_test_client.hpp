#pragma once
// Test helper: a blocking HTTP/1.1 client over a raw socket, with a deadline on every read, so that tests
// can send malformed bytes, hold connections open, and never hang.
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <map>
#include <stdexcept>
#include <string>

namespace ddprun::test {

struct HttpReply {
  int status = 0;
  std::map<std::string, std::string> headers;  ///< names in lower case
  std::string body;
};

class HttpTestClient {
 public:
  /// Connects to host:port (IPv4 or IPv6 literal); throws when it cannot.
  HttpTestClient(const std::string& host, uint16_t port) {
    addrinfo hints{};
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found) {
      throw std::runtime_error("bad address " + host);
    }
    fd_ = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int rc = fd_ < 0 ? -1 : ::connect(fd_, found->ai_addr, found->ai_addrlen);
    ::freeaddrinfo(found);
    if (rc != 0) {
      if (fd_ >= 0) ::close(fd_);
      throw std::runtime_error("cannot connect to " + host + ":" + std::to_string(port));
    }
  }
  ~HttpTestClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  HttpTestClient(const HttpTestClient&) = delete;
  HttpTestClient& operator=(const HttpTestClient&) = delete;

  /// Sends all of `bytes`; false when the server already closed.
  bool send(const std::string& bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }

  /// Sends a GET with `extraHeaders` (each ending in \r\n) and reads its reply.
  HttpReply get(const std::string& target, const std::string& extraHeaders = "") {
    if (!send("GET " + target + " HTTP/1.1\r\nHost: test\r\n" + extraHeaders + "\r\n")) {
      throw std::runtime_error("the server closed the connection");
    }
    return readReply();
  }

  /// Reads one reply (status line, headers and, `withBody`, a Content-Length body); throws on timeout or
  /// EOF. A reply to HEAD has no body.
  HttpReply readReply(std::chrono::milliseconds timeout = std::chrono::seconds(10), bool withBody = true) {
    size_t headerEnd;
    while ((headerEnd = input_.find("\r\n\r\n")) == std::string::npos) fill(timeout);
    HttpReply reply;
    const std::string head = input_.substr(0, headerEnd);
    reply.status = std::stoi(head.substr(head.find(' ') + 1, 3));
    for (size_t line = head.find("\r\n"); line != std::string::npos;) {
      size_t next = head.find("\r\n", line + 2);
      std::string field = head.substr(line + 2, next == std::string::npos ? std::string::npos : next - line - 2);
      size_t colon = field.find(':');
      std::string name = field.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      reply.headers[name] = field.substr(field.find_first_not_of(' ', colon + 1));
      line = next;
    }
    const size_t length =
        withBody && reply.headers.count("content-length") ? std::stoul(reply.headers["content-length"]) : 0;
    while (input_.size() < headerEnd + 4 + length) fill(timeout);
    reply.body = input_.substr(headerEnd + 4, length);
    input_.erase(0, headerEnd + 4 + length);
    return reply;
  }

  /// True when the server closes the connection (EOF or reset) within `timeout` with nothing unread.
  bool closedByServer(std::chrono::milliseconds timeout) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return false;
    char c;
    return ::recv(fd_, &c, 1, 0) <= 0;
  }

 private:
  void fill(std::chrono::milliseconds timeout) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) throw std::runtime_error("no reply in time");
    char chunk[16384];
    ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
    if (n <= 0) throw std::runtime_error("the server closed the connection");
    input_.append(chunk, static_cast<size_t>(n));
  }

  int fd_ = -1;
  std::string input_;
};

}  // namespace ddprun::test
