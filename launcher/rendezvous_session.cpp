#include "launcher/rendezvous_session.hpp"

#include <pthread.h>

#include <spdlog/spdlog.h>

#include "common/net_address.hpp"
#include "launcher/config/local_host.hpp"
#include "rendezvous/node_connections.hpp"
#include "rendezvous/registry.hpp"
#include "rendezvous/static_rendezvous.hpp"
#include "rendezvous/ticket_rendezvous.hpp"
#include "store/store_client.hpp"

namespace ddprun::launcher {
namespace asio = boost::asio;
using std::chrono::milliseconds;

namespace {

milliseconds ms(double seconds) { return milliseconds(static_cast<int64_t>(seconds * 1000.0)); }

/// Whether this node should serve the store at the endpoint, and whether that was asked for explicitly.
std::pair<bool, bool> decideHost(const SessionSettings& config) {
  if (config.rdzv.isHost) return {*config.rdzv.isHost, true};
  if (!config.localAddr.empty() && sameHost(config.localAddr, config.rdzvHost)) return {true, false};
  // Several nodes on one machine tell themselves apart by --local-addr in 127.0.0.0/8: only the exact
  // address hosts. Otherwise any name of this machine does (a pod's service name, a host name).
  if (!config.localAddr.empty() && isLoopbackHost(config.rdzvHost)) return {false, false};
  return {isThisMachine(config.rdzvHost), false};
}

}  // namespace

rendezvous::LivenessSettings livenessOf(const RendezvousConf& conf) {
  return rendezvous::LivenessSettings{ms(conf.keepAliveInterval), conf.keepAliveMaxAttempt};
}

RendezvousSession::RendezvousSession(SessionSettings settings) : config_(std::move(settings)), keepAliveTimer_(io_) {
  hostStoreIfNeeded();
  work_.emplace(io_.get_executor());
  scheduleKeepAlive();
  thread_ = std::thread([this] {
    ::pthread_setname_np(::pthread_self(), "ddprun-rdzv");  // named for top -H and the benchmarks
    io_.run();
  });
}

void RendezvousSession::scheduleKeepAlive() {
  // Half the interval: a heartbeat is never late by more than that, whatever the agent is doing.
  keepAliveTimer_.expires_after(ms(config_.rdzv.keepAliveInterval / 2));
  keepAliveTimer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || cancel_) return;
    if (handler_) handler_->keepAlive();
    scheduleKeepAlive();
  });
}

RendezvousSession::~RendezvousSession() {
  cancel_ = true;
  work_.reset();
  io_.stop();
  if (thread_.joinable()) thread_.join();
  handler_.reset();
  if (hostedStore_) {
    asio::post(storeIo_, [this] { hostedStore_->stop(); });
    storeThread_.join();
  }
}

void RendezvousSession::hostStoreIfNeeded() {
  if (config_.mode != RendezvousMode::kDynamic ||
      !rendezvous::findRendezvousBackend(config_.rdzvBackend)->storeAtEndpoint)
    return;
  const auto [isHost, explicitly] = decideHost(config_);
  if (!isHost) return;
  store::StoreServerOptions options;
  // A loopback endpoint is bound exactly (127.0.0.5 is not 127.0.0.1); any other host on every interface.
  options.host = bindAddressFor(config_.rdzvHost);
  options.port = static_cast<uint16_t>(config_.rdzvPort);
  options.ownUserWritesOnly = true;  // docs/launcher.md, "Who may write to ddprun's stores"
  try {
    hostedStore_ = std::make_unique<store::StoreServer>(storeIo_, options);
  } catch (const store::StoreBindError& e) {
    // torchrun does the same: an inferred host whose bind fails is another node on this machine's client.
    if (explicitly) throw;
    spdlog::info("rendezvous store port {} is taken ({}); joining as a client", config_.rdzvPort, e.what());
    return;
  }
  // A node whose ddprun dies closes its connection at once: its watcher learns it at its next check.
  rendezvous::watchNodeConnections(*hostedStore_);
  // A store that comes back after its host died has another id: the nodes go on with the next round number.
  rendezvous::writeStoreId(*hostedStore_, config_.rdzvId);
  storeThread_ = std::thread([this] {
    ::pthread_setname_np(::pthread_self(), "ddprun-store");  // its CPU is measured by rendezvous_idle.sh
    storeIo_.run();
  });
  spdlog::info("hosting the rendezvous store on {}:{}", options.host, hostedStore_->port());
}

std::unique_ptr<rendezvous::RendezvousHandler> RendezvousSession::connect() {
  const auto& conf = config_.rdzv;
  if (config_.mode == RendezvousMode::kStatic) {
    // Other nodes may start before node 0: keep trying to reach its store for the whole join_timeout.
    auto client = std::make_shared<store::StoreClient>(config_.rdzvHost, static_cast<uint16_t>(config_.rdzvPort),
                                                       ms(conf.readTimeout), ms(conf.joinTimeout), &cancel_);
    rendezvous::StaticRendezvousSettings settings{config_.rdzvId,       config_.minNodes,   config_.nodeRank,
                                                  config_.masterAddr,   config_.masterPort, ms(conf.joinTimeout),
                                                  ms(conf.closeTimeout)};
    return std::make_unique<rendezvous::StaticRendezvous>(std::move(client), settings);
  }
  rendezvous::BackendParams params;
  params.host = config_.rdzvHost;
  params.port = static_cast<uint16_t>(config_.rdzvPort);
  params.runId = config_.rdzvId;
  params.readTimeout = ms(conf.readTimeout);
  params.joinTimeout = ms(conf.joinTimeout);
  params.cancel = &cancel_;
  rendezvous::DynamicRendezvousSettings settings;
  settings.runId = config_.rdzvId;
  settings.limits =
      rendezvous::RoundLimits{config_.minNodes, config_.maxNodes, static_cast<int64_t>(conf.lastCallTimeout * 1000.0)};
  settings.joinTimeout = ms(conf.joinTimeout);
  settings.closeTimeout = ms(conf.closeTimeout);
  settings.liveness = livenessOf(conf);
  settings.hostsStore = hostsStore();
  return rendezvous::findRendezvousBackend(config_.rdzvBackend)->make(params, settings);
}

void RendezvousSession::noteNextCheck(const rendezvous::RendezvousHandler& handler) {
  const auto dueIn = handler.checkDueIn();
  nextCheckNs_ = dueIn.count() <= 0 ? 0
                                    : std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          (std::chrono::steady_clock::now() + dueIn).time_since_epoch())
                                          .count();
}

bool RendezvousSession::checkDue() const {
  const int64_t due = nextCheckNs_;
  return due == 0 || std::chrono::steady_clock::now().time_since_epoch() >= std::chrono::nanoseconds(due);
}

void RendezvousSession::post(std::function<void(rendezvous::RendezvousHandler&)> job,
                             std::function<void(const std::string&)> onConnectError) {
  asio::post(io_, [this, job = std::move(job), onConnectError = std::move(onConnectError)] {
    if (!handler_) {
      try {
        // Reaching another node's store or etcd may take up to join_timeout: say what is being waited for.
        if (!hostsStore()) {
          spdlog::info("connecting to the rendezvous endpoint {}:{} ({})", config_.rdzvHost, config_.rdzvPort,
                       config_.rdzvBackend);
        }
        handler_ = connect();
        spdlog::info("{}", handler_->describe());
      } catch (const std::exception& e) {
        onConnectError(e.what());
        return;
      }
    }
    job(*handler_);
  });
}

}  // namespace ddprun::launcher
