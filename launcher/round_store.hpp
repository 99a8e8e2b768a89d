#pragma once
// The workers' c10d store of each round, served by this agent (TORCHELASTIC_USE_AGENT_STORE=True: every
// rank is a client, as torch 2.x's agents do), or only chosen and announced when rank 0's worker serves it
// itself (--no-agent-store, torch's env:// rules).
#include <boost/asio.hpp>
#include <memory>
#include <string>
#include <vector>

#include "launcher/config/launch_config.hpp"
#include "store/store_server.hpp"

namespace ddprun::launcher {

/// What RoundStore needs of the launch plan (flags of the same names).
struct RoundStoreSettings {
  RendezvousMode mode = RendezvousMode::kSingleNode;
  bool standalone = false;
  std::string masterAddr = "127.0.0.1";
  int masterPort = 29500;
  bool useAgentStore = true;  ///< false: rank 0's worker hosts the store; only its address is chosen here
  std::string localAddr;      ///< where a dynamic round's store listens; "" every interface
};

class RoundStore {
 public:
  RoundStore(boost::asio::io_context& io, RoundStoreSettings settings);
  ~RoundStore();
  RoundStore(const RoundStore&) = delete;
  RoundStore& operator=(const RoundStore&) = delete;

  /// The one store every round uses (a single-node job; node 0 of a static job): --standalone on a free
  /// loopback port, else --master-addr:--master-port. Throws StoreBindError.
  void startFixed();
  /// A fresh store for the next round of a dynamic job, so no key of an earlier round (or membership)
  /// leaks in; returns the port the other nodes are told. Throws ConfigError for a --local-addr it cannot
  /// listen on.
  int startForRound();
  /// Stops serving (at the end of the job).
  void stop();

  /// MASTER_ADDR / MASTER_PORT of startFixed()'s store.
  const std::string& masterAddr() const { return masterAddr_; }
  int masterPort() const { return masterPort_; }
  /// Before an attempt starts: deletes torch's root keys (torchRootStoreKeys: the dump request, the error broadcast)
  /// and the raw root keys the attempt before left (store_server.hpp, deleteRootKeys).
  void clearRootKeys();
  /// The store being served, if any (for the status page).
  const store::StoreServer* server() const { return server_.get(); }
  store::StoreServer* server() { return server_.get(); }

 private:
  boost::asio::io_context& io_;
  const RoundStoreSettings config_;
  std::unique_ptr<store::StoreServer> server_;
  std::vector<std::unique_ptr<store::StoreServer>> retired_;  ///< stopped; freed with this object
  std::string masterAddr_;
  int masterPort_ = 0;
};

}  // namespace ddprun::launcher
