#pragma once
// Test helper: a StatusServer on its own io_context thread, standing in for the agent's loop, with a
// timer ticking beside it that records how late it fires; and a snapshot source that counts its calls.
#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <future>
#include <memory>
#include <thread>

#include "launcher/status/status_server.hpp"
#include "support/fake_snapshot.hpp"

namespace ddprun::test {
using status::SnapshotSource;
using status::StatusServer;
using status::StatusServerOptions;

/// Counts the snapshots taken, to prove when the handler asks for one.
struct CountingSource {
  std::shared_ptr<std::atomic<int>> calls = std::make_shared<std::atomic<int>>(0);
  SnapshotSource source() {
    return [calls = calls] { return fakeSnapshot(++*calls); };
  }
};

/// A StatusServer on its own io_context thread (the agent's loop stands in), with a timer ticking every
/// 10 ms beside it that records how late it fires: the agent's own timers must stay on time.
class RunningServer {
 public:
  explicit RunningServer(StatusServerOptions options = {}, SnapshotSource source = CountingSource().source())
      : guard_(boost::asio::make_work_guard(io_)), tick_(io_) {
    server_ = std::make_unique<StatusServer>(io_, options, std::move(source));
    thread_ = std::thread([this] { io_.run(); });
    onLoop([this] { scheduleTick(); });
  }
  ~RunningServer() {
    onLoop([this] {
      server_->stop();
      // A tick already due when cancel() runs still completes without an error: the flag stops it re-arming.
      stopping_ = true;
      tick_.cancel();
    });
    guard_.reset();
    thread_.join();
  }
  uint16_t port() const { return server_->port(); }
  std::string url() const { return server_->url(); }
  size_t connections() {
    return onLoop([this] { return server_->connectionCount(); });
  }
  uint64_t accepted() {
    return onLoop([this] { return server_->acceptedCount(); });
  }
  /// The largest lateness of the ticking timer so far.
  std::chrono::milliseconds maxTickLateness() {
    return onLoop([this] { return std::chrono::duration_cast<std::chrono::milliseconds>(maxLateness_); });
  }
  void resetTickLateness() {
    onLoop([this] { maxLateness_ = {}; });
  }

  /// Runs `f` on the loop thread and returns its result.
  template <typename F>
  auto onLoop(F f) -> decltype(f()) {
    std::packaged_task<decltype(f())()> task(std::move(f));
    auto result = task.get_future();
    boost::asio::post(io_, [&task] { task(); });
    return result.get();
  }

 private:
  void scheduleTick() {
    tick_.expires_after(std::chrono::milliseconds(10));
    tick_.async_wait([this](boost::system::error_code ec) {
      if (ec || stopping_) return;
      maxLateness_ = std::max(maxLateness_, std::chrono::steady_clock::now() - tick_.expiry());
      scheduleTick();
    });
  }

  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_;
  boost::asio::steady_timer tick_;
  bool stopping_ = false;
  std::chrono::steady_clock::duration maxLateness_{};
  std::unique_ptr<StatusServer> server_;
  std::thread thread_;
};

}  // namespace ddprun::test
