#pragma once
// The multi-node side of an agent: builds the rendezvous this launch asks for (static, or dynamic on
// ddprun's store or on etcd), serves the rendezvous store when this node is its host, and runs the
// rendezvous' blocking calls on a thread of their own so that the agent's loop (worker exits, signals,
// the workers' store) never waits on the network.
#include <atomic>
#include <boost/asio.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <thread>

#include "common/cancel_flag.hpp"
#include "launcher/config/launch_config.hpp"
#include "rendezvous/rendezvous_backend.hpp"
#include "rendezvous/rendezvous_handler.hpp"
#include "store/store_server.hpp"

namespace ddprun::launcher {

/// What RendezvousSession needs of the launch plan (flags of the same names; rdzvHost and rdzvPort from
/// --rdzv-endpoint, or --master-addr/--master-port for a static rendezvous).
struct SessionSettings {
  RendezvousMode mode = RendezvousMode::kStatic;
  std::string rdzvBackend = "static";
  std::string rdzvHost;
  int rdzvPort = 0;
  std::string rdzvId = "none";
  RendezvousConf rdzv;
  int minNodes = 1, maxNodes = 1;
  int nodeRank = 0;
  std::string masterAddr;
  int masterPort = 0;
  std::string localAddr;
};

/// The heartbeat rule of --rdzv-conf (keep_alive_interval, keep_alive_max_attempt); its expiry() is how long a
/// node or the backend may stay silent before it counts as lost.
rendezvous::LivenessSettings livenessOf(const RendezvousConf& conf);

class RendezvousSession {
 public:
  /// For RendezvousMode::kStatic or kDynamic. Starts serving the rendezvous store when this node hosts it
  /// (dynamic c10d: is_host, or the endpoint is this machine). Throws store::StoreBindError when an
  /// explicit host cannot bind the endpoint.
  explicit RendezvousSession(SessionSettings settings);
  /// Cancels any call in progress and waits for it (each is bounded), then stops the hosted store.
  ~RendezvousSession();

  /// Runs `job` on the rendezvous thread, in order; the first job also connects to the backend (retrying
  /// until join_timeout). Exceptions from connecting reach `job`'s caller through `onConnectError`.
  void post(std::function<void(rendezvous::RendezvousHandler&)> job,
            std::function<void(const std::string&)> onConnectError);

  /// Makes the call in progress (and later ones) throw RendezvousCancelled as soon as they can.
  void cancel() { cancel_ = true; }
  const CancelFlag& cancelFlag() const { return cancel_; }

  /// Whether this node serves the rendezvous store (and must outlive the other nodes' use of it).
  bool hostsStore() const { return hostedStore_ != nullptr; }

  /// On the rendezvous thread, after a check: notes when `handler` reads the backend next (checkDueIn()).
  void noteNextCheck(const rendezvous::RendezvousHandler& handler);
  /// From any thread: whether a membership check now would read the backend. The agent's every-tick check is
  /// skipped until then: posting it costs two thread wake-ups per --monitor-interval, which a thousand agents on
  /// one machine pay 10,000 times a second, for a check that returns at once.
  bool checkDue() const;

 private:
  void hostStoreIfNeeded();
  void scheduleKeepAlive();
  std::unique_ptr<rendezvous::RendezvousHandler> connect();

  const SessionSettings config_;
  CancelFlag cancel_;
  // The hosted rendezvous store runs on its own thread: the agent's loop may be busy, and the rendezvous
  // thread blocks in calls to it.
  boost::asio::io_context storeIo_;
  std::unique_ptr<store::StoreServer> hostedStore_;
  std::thread storeThread_;
  boost::asio::io_context io_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  boost::asio::steady_timer keepAliveTimer_;  // on the rendezvous thread
  std::unique_ptr<rendezvous::RendezvousHandler> handler_;
  std::atomic<int64_t> nextCheckNs_{0};  ///< steady_clock nanoseconds; 0: due now
  std::thread thread_;
};

}  // namespace ddprun::launcher
