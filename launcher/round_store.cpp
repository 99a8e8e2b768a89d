#include "launcher/round_store.hpp"

#include <spdlog/spdlog.h>

#include "common/error.hpp"
#include "common/net_address.hpp"
#include "launcher/config/local_host.hpp"
#include "launcher/watch/evidence/flight_recorder.hpp"

namespace ddprun::launcher {
namespace asio = boost::asio;

namespace {

/// A port that was free on `host` a moment ago (the same race torchrun accepts for this case).
int freePort(const std::string& host) {
  asio::io_context io;
  asio::ip::tcp::acceptor probe(io, {asio::ip::make_address(host), 0});
  return probe.local_endpoint().port();
}

/// --local-addr may be a name: the store binds the address it resolves to. Throws ConfigError.
std::string resolveLocalAddr(const std::string& localAddr) {
  asio::io_context io;
  boost::system::error_code ec;
  auto results = asio::ip::tcp::resolver(io).resolve(localAddr, "0", ec);
  if (ec || results.empty()) {
    throw ConfigError("--local-addr " + localAddr + ": cannot resolve it to an address of this machine (" +
                      ec.message() + ")");
  }
  return results.begin()->endpoint().address().to_string();
}

}  // namespace

RoundStore::RoundStore(asio::io_context& io, RoundStoreSettings settings) : io_(io), config_(std::move(settings)) {}

RoundStore::~RoundStore() { stop(); }

void RoundStore::startFixed() {
  // One node: only its own workers reach the store, so it listens on loopback; a port not given is a free one, so
  // two jobs on one machine never collide (torchrun 2.x does the same for a single node without an endpoint).
  const bool singleNode = config_.mode == RendezvousMode::kSingleNode;
  const bool local =
      config_.standalone || (singleNode && (isLoopbackHost(config_.masterAddr) || isThisMachine(config_.masterAddr)));
  // A loopback address as given ("::1", "localhost"); this machine's own name or address becomes 127.0.0.1.
  const std::string host = !local                                                      ? config_.masterAddr
                           : config_.standalone || !isLoopbackHost(config_.masterAddr) ? "127.0.0.1"
                                                                                       : config_.masterAddr;
  const int port = config_.standalone ? 0 : config_.masterPort;
  if (!config_.useAgentStore) {
    // Rank 0's worker hosts the store (torch's env:// rules), on a port free now when none was given.
    masterAddr_ = host;
    masterPort_ = port == 0 ? freePort(host) : port;
    spdlog::info("no agent store: rank 0 hosts the store at {}:{}", masterAddr_, masterPort_);
    return;
  }
  store::StoreServerOptions options;
  options.host = bindAddressFor(host);
  options.port = static_cast<uint16_t>(port);
  options.ownUserWritesOnly = true;  // docs/launcher.md, "Who may write to ddprun's stores"
  masterAddr_ = host;
  server_ = std::make_unique<store::StoreServer>(io_, options);
  masterPort_ = server_->port();
  spdlog::info("store listening on {}:{}{} (workers use MASTER_ADDR={} MASTER_PORT={})", options.host, masterPort_,
               port == 0 && !config_.standalone ? ", a free port: give --master-port for a fixed one" : "", masterAddr_,
               masterPort_);
}

int RoundStore::startForRound() {
  if (server_) {
    server_->stop();
    retired_.push_back(std::move(server_));
  }
  const std::string bindHost = config_.localAddr.empty() ? "0.0.0.0" : resolveLocalAddr(config_.localAddr);
  if (!config_.useAgentStore) return freePort(bindHost);  // rank 0's worker will bind it
  store::StoreServerOptions options;
  options.host = bindHost;
  options.port = 0;
  options.ownUserWritesOnly = true;  // docs/launcher.md, "Who may write to ddprun's stores"
  try {
    server_ = std::make_unique<store::StoreServer>(io_, options);
  } catch (const store::StoreBindError& e) {
    throw ConfigError("--local-addr " + config_.localAddr + ": the workers' store cannot listen there (" + e.what() +
                      "); give an address of this machine");
  }
  return server_->port();
}

void RoundStore::clearRootKeys() {
  if (!server_) return;
  if (const size_t deleted = server_->deleteRootKeys(torchRootStoreKeys())) {
    spdlog::debug("deleted {} key(s) an earlier attempt left at the root of the workers' store", deleted);
  }
}

void RoundStore::stop() {
  if (server_) server_->stop();
}

}  // namespace ddprun::launcher
