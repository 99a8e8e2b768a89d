#include "store/store_client.hpp"

#include <spdlog/spdlog.h>

#include <cstring>
#include <thread>

#include "common/backoff.hpp"
#include "common/close_on_exec.hpp"
#include "store/store_errors.hpp"

namespace ddprun::store {
namespace asio = boost::asio;
using boost::system::error_code;

StoreClient::StoreClient(std::string host, uint16_t port, std::chrono::milliseconds operationTimeout,
                         std::chrono::milliseconds connectTimeout, const CancelFlag* cancel, ddprun::Clock& clock)
    : host_(std::move(host)),
      port_(port),
      timeout_(operationTimeout),
      cancel_(cancel),
      clock_(clock),
      socket_(io_),
      input_(new char[kInputBytes]) {
  connect(connectTimeout, true);
}

std::string StoreClient::describe() const { return "c10d store at " + host_ + ":" + std::to_string(port_); }

void StoreClient::dropConnection() {
  error_code ignored;
  socket_.close(ignored);
  io_.restart();
  io_.run();
}

void StoreClient::fail(const std::string& what) {
  dropConnection();
  throw StoreConnectionError(describe() + ": " + what);
}

void StoreClient::runUntil(const bool& done, Clock::time_point deadline, const char* what) {
  io_.restart();
  while (!done) {
    const auto now = Clock::now();
    if (now >= deadline || io_.run_one_for(deadline - now) == 0) {
      if (done) break;
      dropConnection();
      throw StoreTimeout(describe() + ": " + what + " timed out");
    }
  }
}

void StoreClient::connect(std::chrono::milliseconds timeout, bool retry) {
  const Deadline deadline(clock_, timeout);
  Backoff backoff(std::chrono::milliseconds(50), std::chrono::milliseconds(1000));
  auto nextLog = clock_.now() + std::chrono::seconds(2);
  std::string lastError = "no attempt";
  while (true) {
    error_code ec;
    asio::ip::tcp::resolver resolver(io_);
    auto endpoints = resolver.resolve(host_, std::to_string(port_), ec);
    if (!ec) {
      bool done = false;
      socket_ = asio::ip::tcp::socket(io_);
      inputBegin_ = inputEnd_ = 0;  // nothing read on an earlier connection belongs to this one
      asio::async_connect(socket_, endpoints, [&](const error_code& e, const auto&) {
        ec = e;
        done = true;
      });
      try {
        runUntil(done, Clock::now() + std::min(deadline.remaining(), timeout_), "connect");
      } catch (const StoreTimeout&) {
        ec = asio::error::timed_out;
      }
    }
    if (!ec) {
      // Not inherited by what ddprun starts (Asio opens sockets without close-on-exec): a helper holding a node's
      // connection would keep the node alive in the store host's eyes after ddprun died.
      closeOnExec(socket_.native_handle());
      socket_.set_option(asio::ip::tcp::no_delay(true));
      send(WireWriter().u8(0).u32(kValidateMagic).take());  // 2.x handshake: VALIDATE + magic, no reply
      return;
    }
    lastError = ec.message();
    if (!retry) {
      error_code ignored;
      socket_.close(ignored);
      throw StoreConnectionError(describe() + ": cannot connect (" + lastError + ")");
    }
    const auto delay = backoff.next();
    if (delay >= deadline.remaining()) break;
    if (cancel_ != nullptr && *cancel_) throw StoreCancelled(describe() + ": cancelled while connecting");
    if (clock_.now() >= nextLog) {
      // The host node may simply not be up yet; say so, so that a long wait is not a silent one.
      spdlog::info("{}: not reachable yet ({}); retrying for up to {} s more", describe(), lastError,
                   std::chrono::duration_cast<std::chrono::seconds>(deadline.remaining()).count());
      nextLog = clock_.now() + std::chrono::seconds(10);
    }
    clock_.sleepFor(delay);
  }
  error_code ignored;
  socket_.close(ignored);
  throw StoreConnectionError(describe() + ": cannot connect within " +
                             std::to_string(timeout.count() / 1000.0).substr(0, 5) + " s (" + lastError + ")");
}

void StoreClient::ensureConnected() {
  // One attempt: a caller that keeps calling (keep-alive, monitor) is the retry loop, and must learn soon
  // that the store is gone.
  if (!socket_.is_open()) connect(timeout_, false);
}

uint8_t StoreClient::commandByte(Command command) const { return *encodeCommand(Dialect::kTorch2, command); }

void StoreClient::send(const std::string& bytes) {
  bool done = false;
  error_code ec;
  asio::async_write(socket_, asio::buffer(bytes), [&](const error_code& e, size_t) {
    ec = e;
    done = true;
  });
  runUntil(done, Clock::now() + timeout_, "send");
  if (ec) fail("send failed: " + ec.message());
}

void StoreClient::startRead(bool& done, error_code& ec) {
  inputBegin_ = inputEnd_ = 0;
  socket_.async_read_some(asio::buffer(input_.get(), kInputBytes), [&](const error_code& e, size_t n) {
    ec = e;
    inputEnd_ = n;
    done = true;
  });
}

std::string StoreClient::receive(size_t n, Clock::time_point deadline) {
  std::string out;
  out.reserve(n);
  while (out.size() < n) {
    if (inputBegin_ == inputEnd_) {
      bool done = false;
      error_code ec;
      startRead(done, ec);
      runUntil(done, deadline, "reply");
      if (ec == asio::error::eof) fail("the store closed the connection");
      if (ec) fail("receive failed: " + ec.message());
    }
    const size_t take = std::min(n - out.size(), inputEnd_ - inputBegin_);
    out.append(input_.get() + inputBegin_, take);
    inputBegin_ += take;
  }
  return out;
}

int64_t StoreClient::receiveI64(Clock::time_point deadline) {
  int64_t value;
  const std::string raw = receive(8, deadline);
  std::memcpy(&value, raw.data(), 8);
  return value;
}

std::string StoreClient::receiveBytes(Clock::time_point deadline) {
  const int64_t size = receiveI64(deadline);
  // Our own state values are small; a huge length means a confused stream, not a real value.
  if (size < 0 || size > (int64_t{64} << 20)) fail("implausible value length " + std::to_string(size));
  return receive(static_cast<size_t>(size), deadline);
}

void StoreClient::set(const std::string& key, const std::string& value) {
  ensureConnected();
  send(WireWriter().u8(commandByte(Command::kSet)).bytes(key).bytes(value).take());
}

std::optional<std::string> StoreClient::get(const std::string& key) {
  ensureConnected();
  send(WireWriter().u8(commandByte(Command::kGet)).bytes(key).take());
  std::string value = receiveBytes(Clock::now() + timeout_);
  if (value.empty()) return std::nullopt;
  return value;
}

std::string StoreClient::compareSet(const std::string& key, const std::string& expected, const std::string& desired) {
  ensureConnected();
  send(WireWriter().u8(commandByte(Command::kCompareSet)).bytes(key).bytes(expected).bytes(desired).take());
  return receiveBytes(Clock::now() + timeout_);
}

int64_t StoreClient::add(const std::string& key, int64_t delta) {
  ensureConnected();
  send(WireWriter().u8(commandByte(Command::kAdd)).bytes(key).i64(delta).take());
  return receiveI64(Clock::now() + timeout_);
}

void StoreClient::erase(const std::string& key) {
  ensureConnected();
  send(WireWriter().u8(commandByte(Command::kDeleteKey)).bytes(key).take());
  receiveI64(Clock::now() + timeout_);  // 1 or 0: whether the key existed, which the caller does not need
}

void StoreClient::multiSet(const std::vector<std::pair<std::string, std::string>>& entries) {
  ensureConnected();
  WireWriter request;
  request.u8(commandByte(Command::kMultiSet)).i64(static_cast<int64_t>(entries.size()));
  for (const auto& [key, value] : entries) request.bytes(key).bytes(value);
  send(request.take());
}

std::vector<std::string> StoreClient::multiGet(const std::vector<std::string>& keys) {
  ensureConnected();
  WireWriter request;
  request.u8(commandByte(Command::kMultiGet)).i64(static_cast<int64_t>(keys.size()));
  for (const auto& key : keys) request.bytes(key);
  send(request.take());
  const auto deadline = Clock::now() + timeout_;
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) values.push_back(receiveBytes(deadline));
  return values;
}

bool StoreClient::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  ensureConnected();
  WireWriter request;
  request.u8(commandByte(Command::kWait)).i64(static_cast<int64_t>(keys.size()));
  for (const auto& key : keys) request.bytes(key);
  send(request.take());

  // Wait for the one reply byte, but a timeout here is expected, not a failure.
  bool done = inputBegin_ < inputEnd_;
  error_code ec;
  if (!done) startRead(done, ec);
  io_.restart();
  const auto deadline = Clock::now() + timeout;
  const bool cancellable = cancel_ != nullptr;
  // A stop wakes the loop at once (a no-op handler posted by the flag's setter): an idle node's thread sleeps
  // through the whole WAIT instead of looking at its flag every 250 ms, which cost a context switch each, four
  // a second in every waiting node.
  const auto wakeOnStop = cancellable ? cancel_->onSet([this] { asio::post(io_, [] {}); }) : CancelFlag::Subscription();
  // A timer for the deadline and run_one(), not run_one_until(deadline): Asio's run_one_until wakes the thread every
  // second of a longer wait, a wake-up a second in every node waiting for a rendezvous.
  bool timedOut = false, timerPending = true;
  asio::steady_timer timer(io_, deadline);
  timer.async_wait([&](const error_code& e) {
    timedOut = !e;
    timerPending = false;
  });
  while (!done && !timedOut && !(cancellable && *cancel_)) io_.run_one();
  timer.cancel();
  while (timerPending) io_.run_one();  // its handler uses the flags above: let it run before they go
  if (done) {
    if (ec) fail("WAIT failed: " + ec.message());
    receive(1, Clock::now() + timeout_);  // STOP_WAITING, in the buffer now
    return true;
  }
  const bool cancelled = cancellable && *cancel_;
  // Timed out (or cancelled): the read is still pending. Cancel the registration (2.x CANCEL_WAIT); the server answers
  // WAIT_CANCELED, preceded by STOP_WAITING if the keys arrived meanwhile (TCPStore.cpp, doWait).
  send(WireWriter().u8(commandByte(Command::kCancelWait)).take());
  runUntil(done, Clock::now() + timeout_, "CANCEL_WAIT");
  if (ec) fail("WAIT failed: " + ec.message());
  const std::string reply = receive(1, Clock::now() + timeout_);  // in the buffer now
  if (static_cast<uint8_t>(reply[0]) == kWaitCanceled) {
    if (cancelled) throw StoreCancelled(describe() + ": cancelled while waiting");
    return false;
  }
  receive(1, Clock::now() + timeout_);  // the WAIT_CANCELED that follows a raced STOP_WAITING
  return true;
}

}  // namespace ddprun::store
