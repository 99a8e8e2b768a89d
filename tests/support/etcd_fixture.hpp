#pragma once
// Test helper: a real single-member etcd (/usr/bin/etcd, Debian's etcd-server) on 127.0.0.1 with free
// client and peer ports and a temp data dir, started for a test and killed (SIGKILL) and cleaned up when
// the object goes away. Where util-linux's setpriv exists, etcd also gets SIGKILL when the test process
// dies without cleaning up, so a crashed test leaves no etcd behind.
#include <unistd.h>

#include <boost/asio.hpp>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/etcd_client.hpp"
#include "rendezvous/rendezvous_backend.hpp"
#include "support/child_process.hpp"
#include "support/wait_until.hpp"

namespace ddprun::test {

class EtcdServer {
 public:
  static constexpr const char* kBinary = "/usr/bin/etcd";

  /// Why no etcd can be started here, or empty when it can (for GTEST_SKIP).
  static std::string unavailableReason() {
    if (::access(kBinary, X_OK) == 0) return "";
    return std::string(kBinary) + " is missing (tools/setup.sh installs Debian's etcd-server)";
  }

  /// Starts etcd and waits (up to `readyTimeout`) until it answers a read. Throws std::runtime_error with
  /// etcd's output when it does not come up (a port taken in the meantime is retried).
  explicit EtcdServer(std::chrono::milliseconds readyTimeout = std::chrono::seconds(20)) {
    dataDir_ = makeTempDir("etcd");
    std::string lastError;
    for (int attempt = 0; attempt < 3; ++attempt) {
      if (tryStart(readyTimeout, lastError)) return;
    }
    std::filesystem::remove_all(dataDir_);
    throw std::runtime_error("etcd did not start: " + lastError);
  }

  ~EtcdServer() {
    kill();
    std::error_code ec;
    std::filesystem::remove_all(dataDir_, ec);
  }
  EtcdServer(const EtcdServer&) = delete;
  EtcdServer& operator=(const EtcdServer&) = delete;

  uint16_t port() const { return clientPort_; }
  bool running() { return child_ && child_->running(); }

  /// Kills etcd and starts it again on the same ports and data (a crash and a restart by a supervisor).
  void restart(std::chrono::milliseconds readyTimeout = std::chrono::seconds(20)) {
    kill();
    std::string error;
    if (!start(readyTimeout, error)) throw std::runtime_error("etcd did not restart: " + error);
  }

  /// The value of `name` in etcd's Prometheus metrics (GET /metrics on the client port), or -1 when it cannot be
  /// read. E.g. etcd_debugging_mvcc_watcher_total: the watchers etcd holds open now.
  double metric(const std::string& name) const {
    try {
      boost::asio::io_context io;
      boost::asio::ip::tcp::socket socket(io);
      socket.connect({boost::asio::ip::make_address("127.0.0.1"), clientPort_});
      const std::string request = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
      boost::asio::write(socket, boost::asio::buffer(request));
      std::string text;
      boost::system::error_code ec;
      boost::asio::read(socket, boost::asio::dynamic_buffer(text), ec);  // until etcd closes (HTTP/1.0)
      const auto at = text.find("\n" + name + " ");
      if (at == std::string::npos) return -1;
      return std::stod(text.substr(at + name.size() + 2));
    } catch (const std::exception&) {
      return -1;
    }
  }

  /// Waits until etcd holds at least `count` open watchers; false when `timeout` passes first.
  bool waitForWatchers(int count, std::chrono::milliseconds timeout) const {
    return waitUntil([&] { return metric("etcd_debugging_mvcc_watcher_total") >= count; }, timeout);
  }

  /// SIGKILL, as a crash would; returns once etcd is gone.
  void kill() {
    if (!child_) return;
    if (child_->running()) child_->sendSignal(SIGKILL);
    child_->wait(std::chrono::seconds(10));
    child_.reset();
  }

 private:
  bool tryStart(std::chrono::milliseconds readyTimeout, std::string& error) {
    clientPort_ = static_cast<uint16_t>(freePort());
    peerPort_ = freePort();
    while (peerPort_ == clientPort_) peerPort_ = freePort();
    if (start(readyTimeout, error)) return true;
    std::filesystem::remove_all(dataDir_ + "/data");
    return false;
  }

  bool start(std::chrono::milliseconds readyTimeout, std::string& error) {
    const std::string client = "http://127.0.0.1:" + std::to_string(clientPort_);
    const std::string peer = "http://127.0.0.1:" + std::to_string(peerPort_);
    std::vector<std::string> args{"--name",
                                  "t",
                                  "--data-dir",
                                  dataDir_ + "/data",
                                  "--listen-client-urls",
                                  client,
                                  "--advertise-client-urls",
                                  client,
                                  "--listen-peer-urls",
                                  peer,
                                  "--initial-advertise-peer-urls",
                                  peer,
                                  "--initial-cluster",
                                  "t=" + peer};
    std::string program = kBinary;
    if (::access("/usr/bin/setpriv", X_OK) == 0) {
      args.insert(args.begin(), {"--pdeathsig", "KILL", "--", kBinary});
      program = "/usr/bin/setpriv";
    }
    child_ = std::make_unique<ChildProcess>(program, args, std::map<std::string, std::string>{});
    if (waitReady(readyTimeout)) return true;
    error = child_->running() ? "no answer on port " + std::to_string(clientPort_) + " within " +
                                    std::to_string(readyTimeout.count()) + " ms"
                              : "it exited";
    const auto result = child_->wait(std::chrono::seconds(1));  // kills it if still running
    error += "; its output: " + result.output.substr(result.output.size() > 3000 ? result.output.size() - 3000 : 0);
    child_.reset();
    return false;
  }

  bool waitReady(std::chrono::milliseconds readyTimeout) {
    rendezvous::EtcdClient probe("127.0.0.1", clientPort_, std::chrono::milliseconds(1000));
    bool ready = false;
    waitUntil(
        [&] {
          try {
            probe.get("/ddprun-test/ready");
            ready = true;
          } catch (const rendezvous::RendezvousBackendError&) {
            // etcd is still starting
          }
          return ready || !child_->running();
        },
        readyTimeout);
    return ready;
  }

  std::string dataDir_;
  uint16_t clientPort_ = 0;
  int peerPort_ = 0;
  std::unique_ptr<ChildProcess> child_;
};

}  // namespace ddprun::test
