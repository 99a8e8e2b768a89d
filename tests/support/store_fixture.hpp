#pragma once
// Test helper: a StoreServer on 127.0.0.1 (free port) running on its own io_context thread, and a raw
// blocking socket client that speaks bytes, for protocol-level tests.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <boost/asio.hpp>

#include <cstring>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "store/store_server.hpp"

namespace ddprun::test {

class RunningStore {
 public:
  explicit RunningStore(store::StoreServerOptions options = {}) {
    options.host = "127.0.0.1";
    options.port = 0;
    server_ = std::make_unique<store::StoreServer>(io_, options);
    thread_ = std::thread([this] { io_.run(); });
  }
  explicit RunningStore(const store::StoreLimits& limits)
      : RunningStore(store::StoreServerOptions{"127.0.0.1", 0, limits, {}}) {}
  ~RunningStore() {
    boost::asio::post(io_, [this] {
      server_->stop();
      io_.stop();
    });
    thread_.join();
  }
  uint16_t port() const { return server_->port(); }
  /// Runs `query` on the store's own thread (the server is single-threaded) and returns its result.
  template <typename Query>
  auto onLoop(Query query) -> decltype(query(std::declval<store::StoreServer&>())) {
    std::packaged_task<decltype(query(std::declval<store::StoreServer&>()))()> task([&] { return query(*server_); });
    auto result = task.get_future();
    boost::asio::post(io_, [&task] { task(); });
    return result.get();
  }
  size_t connectionCount() {
    return onLoop([](store::StoreServer& s) { return s.connectionCount(); });
  }
  uint64_t bufferedBytes() {
    return onLoop([](store::StoreServer& s) { return s.bufferedBytes(); });
  }
  uint64_t usedBytes() {
    return onLoop([](store::StoreServer& s) { return s.usedBytes(); });
  }
  int64_t keyCount() {
    return onLoop([](store::StoreServer& s) { return s.keyCount(); });
  }
  uint64_t replyBytesQueued() {
    return onLoop([](store::StoreServer& s) { return s.replyBytesQueued(); });
  }

 private:
  boost::asio::io_context io_;
  std::unique_ptr<store::StoreServer> server_;
  std::thread thread_;
};

/// Encodes wire fields like the c10d client does (native little-endian).
class Bytes {
 public:
  Bytes& u8(uint8_t v) {
    out_.push_back(static_cast<char>(v));
    return *this;
  }
  Bytes& u32(uint32_t v) { return raw(&v, 4); }
  Bytes& u64(uint64_t v) { return raw(&v, 8); }
  Bytes& str(const std::string& s) {
    u64(s.size());
    out_ += s;
    return *this;
  }
  const std::string& data() const { return out_; }

 private:
  Bytes& raw(const void* p, size_t n) {
    out_.append(static_cast<const char*>(p), n);
    return *this;
  }
  std::string out_;
};

/// A blocking client with a receive timeout, so a test fails instead of hanging.
class RawClient {
 public:
  /// `receiveBufferBytes` > 0 fixes the socket's receive buffer before it connects (Linux then stops autotuning
  /// it), so that a client that never reads cannot have the kernel hold megabytes of the store's replies for it.
  explicit RawClient(uint16_t port, int receiveBufferBytes = 0)
      : io_(std::make_unique<boost::asio::io_context>()), socket_(*io_) {
    socket_.open(boost::asio::ip::tcp::v4());
    if (receiveBufferBytes > 0) socket_.set_option(boost::asio::socket_base::receive_buffer_size(receiveBufferBytes));
    socket_.connect({boost::asio::ip::make_address("127.0.0.1"), port});
  }
  void send(const std::string& bytes) { boost::asio::write(socket_, boost::asio::buffer(bytes)); }
  void send(const Bytes& bytes) { send(bytes.data()); }
  /// Reads exactly n bytes; throws on a 5 s timeout or EOF. (Asio's blocking reads ignore SO_RCVTIMEO,
  /// so this polls the native socket.)
  std::string read(size_t n) {
    std::string out(n, '\0');
    size_t done = 0;
    while (done < n) {
      if (!readable(5000)) throw std::runtime_error("timed out waiting for the store's reply");
      ssize_t got = ::recv(socket_.native_handle(), out.data() + done, n - done, 0);
      if (got <= 0) throw std::runtime_error("the store closed the connection");
      done += static_cast<size_t>(got);
    }
    return out;
  }
  uint8_t readU8() { return static_cast<uint8_t>(read(1)[0]); }
  int64_t readI64() {
    int64_t v;
    auto s = read(8);
    std::memcpy(&v, s.data(), 8);
    return v;
  }
  uint32_t readU32() {
    uint32_t v;
    auto s = read(4);
    std::memcpy(&v, s.data(), 4);
    return v;
  }
  std::string readBytes() { return read(static_cast<size_t>(readI64())); }
  /// True when the server closed the connection (EOF or reset) within 5 s.
  bool closedByServer() {
    if (!readable(5000)) return false;
    char c;
    return ::recv(socket_.native_handle(), &c, 1, 0) <= 0;
  }
  /// Reads and drops whatever arrives until the server closes the connection (true) or nothing arrives
  /// for `ms` milliseconds (false).
  bool drainedToClose(int ms) {
    char buffer[65536];
    while (readable(ms)) {
      if (::recv(socket_.native_handle(), buffer, sizeof buffer, 0) <= 0) return true;
    }
    return false;
  }
  /// True when nothing arrives within `ms` milliseconds.
  bool silentFor(int ms) { return !readable(ms); }
  /// Sends `bytes` and closes, the end of stream travelling in the same segment as the last bytes (TCP_CORK
  /// holds them until the FIN joins): a client that is gone by the time the store reads its request.
  void sendThenClose(const Bytes& bytes) {
    const int fd = socket_.native_handle();
    int on = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_CORK, &on, sizeof on);
    send(bytes);
    ::shutdown(fd, SHUT_WR);
    socket_.close();
  }
  /// Shrinks the kernel's receive buffer, so that unread replies stay in the store.
  void setReceiveBuffer(int bytes) {
    ::setsockopt(socket_.native_handle(), SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
  }
  /// Reads at most `max` bytes if any arrive within `ms` milliseconds; "" otherwise or at end of stream.
  std::string readSome(size_t max, int ms) {
    if (!readable(ms)) return "";
    std::string buffer(max, '\0');
    const ssize_t n = ::recv(socket_.native_handle(), buffer.data(), max, 0);
    buffer.resize(n > 0 ? static_cast<size_t>(n) : 0);
    return buffer;
  }

 private:
  bool readable(int ms) {
    pollfd p{socket_.native_handle(), POLLIN, 0};
    return ::poll(&p, 1, ms) > 0;
  }

  std::unique_ptr<boost::asio::io_context> io_;  // heap: the client stays movable
  boost::asio::ip::tcp::socket socket_;
};

/// 2.x command bytes (TCPStoreBackend.hpp), for raw-socket tests.
enum V2 : uint8_t {
  kValidate = 0,
  kSet,
  kCompareSet,
  kGet,
  kAdd,
  kCheck,
  kWait,
  kGetNumKeys,
  kDeleteKey,
  kAppend,
  kMultiGet,
  kMultiSet,
  kCancelWait,
  kPing,
  kQueuePush,
  kQueuePop,
  kQueueLen,
  kListKeys,
  kBarrier
};

/// A raw 2.x client past its handshake (VALIDATE, then a PING answered).
inline RawClient validatedClient(uint16_t port, int receiveBufferBytes = 0) {
  RawClient c(port, receiveBufferBytes);
  c.send(Bytes().u8(kValidate).u32(0x3C85F7CE).u8(kPing).u32(1234));
  if (c.readU32() != 1234u) throw std::runtime_error("the store did not answer PING");
  return c;
}

}  // namespace ddprun::test
