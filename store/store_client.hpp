#pragma once
// A blocking TCPStore client in the 2.x dialect (VALIDATE handshake, CANCEL_WAIT on a timed-out WAIT),
// used by ddprun's own rendezvous against ddprun's store. Layouts: wire_protocol.hpp and PyTorch's
// torch/csrc/distributed/c10d/TCPStore.cpp. Every call is bounded by the operation timeout; a failed
// call closes the connection and the next call reconnects. Throws the store's own errors
// (store_errors.hpp), never a caller's.
#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/cancel_flag.hpp"
#include "common/clock.hpp"
#include "store/store.hpp"
#include "store/wire_protocol.hpp"

namespace ddprun::store {

class StoreClient : public Store {
 public:
  using Clock = std::chrono::steady_clock;

  /// Connects to host:port, retrying with back-off (50 ms doubling to 1 s, on `clock`) until
  /// `connectTimeout` passes; later calls each have `operationTimeout`, and after a failure reconnect
  /// once, without retrying. Throws StoreConnectionError naming the store; `cancel` (optional) ends the
  /// first connection's retries early with StoreCancelled, and a WAIT in progress at once (setting it wakes
  /// the wait; the wait is cancelled on the server first). Operations throw StoreTimeout when a reply is late and
  /// StoreConnectionError when the connection fails.
  StoreClient(std::string host, uint16_t port, std::chrono::milliseconds operationTimeout,
              std::chrono::milliseconds connectTimeout, const CancelFlag* cancel = nullptr,
              ddprun::Clock& clock = SystemClock::instance());

  std::string describe() const override;
  void set(const std::string& key, const std::string& value) override;
  std::optional<std::string> get(const std::string& key) override;
  std::string compareSet(const std::string& key, const std::string& expected, const std::string& desired) override;
  int64_t add(const std::string& key, int64_t delta) override;
  /// DELETE_KEY.
  void erase(const std::string& key) override;
  /// MULTI_SET (torch 2.x): one request, no reply.
  void multiSet(const std::vector<std::pair<std::string, std::string>>& entries) override;
  std::vector<std::string> multiGet(const std::vector<std::string>& keys) override;
  bool wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

 private:
  void connect(std::chrono::milliseconds timeout, bool retry);
  void ensureConnected();
  void send(const std::string& bytes);
  /// The next `n` bytes of the replies: from the input buffer, which is refilled a recv(2) at a time.
  std::string receive(size_t n, Clock::time_point deadline);
  /// Starts reading what the socket has (at least a byte) into the emptied input buffer; `done` once it did.
  void startRead(bool& done, boost::system::error_code& ec);
  int64_t receiveI64(Clock::time_point deadline);
  std::string receiveBytes(Clock::time_point deadline);
  /// Runs the io_context until `done` or the deadline; on the deadline closes the socket and throws.
  void runUntil(const bool& done, Clock::time_point deadline, const char* what);
  /// Closes the socket and lets the handlers of operations still pending run (aborted) now, while the buffers and
  /// flags they use exist (e.g. a WAIT's read whose CANCEL_WAIT could not be sent), and not later, into the next
  /// connection's input buffer.
  void dropConnection();
  /// dropConnection(), then throws StoreConnectionError naming the store and `what`.
  [[noreturn]] void fail(const std::string& what);
  uint8_t commandByte(Command command) const;

  std::string host_;
  uint16_t port_;
  std::chrono::milliseconds timeout_;
  const CancelFlag* cancel_ = nullptr;
  ddprun::Clock& clock_;  ///< paces the connect retries
  boost::asio::io_context io_;
  boost::asio::ip::tcp::socket socket_;
  /// Replies are read a buffer at a time and taken from it: a reply read field by field cost a recv(2) per field
  /// (2n for a MULTI_GET of n keys: 2,048 for a closer reading a 1,024-node round's records).
  static constexpr size_t kInputBytes = 16 * 1024;
  std::unique_ptr<char[]> input_;
  size_t inputBegin_ = 0, inputEnd_ = 0;  ///< the bytes received and not taken yet; emptied with every new socket
};

}  // namespace ddprun::store
