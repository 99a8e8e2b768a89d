#include "rendezvous/etcd_node_lease.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "rendezvous/rendezvous_backend.hpp"

namespace ddprun::rendezvous {

EtcdNodeLease::EtcdNodeLease(std::string host, uint16_t port, std::chrono::milliseconds timeout)
    : client_(std::move(host), port, std::min<std::chrono::milliseconds>(timeout, kTtl)) {}

EtcdNodeLease::~EtcdNodeLease() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (renewer_.joinable()) renewer_.join();
  if (lease_ == 0) return;
  try {
    client_.revokeLease(lease_);
  } catch (const std::exception& e) {
    // The lease then lapses by itself within kTtl.
    spdlog::debug("could not revoke this node's etcd lease: {}", e.what());
  }
}

void EtcdNodeLease::hold(const std::string& key) {
  std::lock_guard lock(mutex_);
  if (lease_ == 0) lease_ = client_.grantLease(kTtl);
  if (!key_.empty() && key_ != key) client_.remove(key_);
  client_.put(key, "1", lease_);
  key_ = key;
  if (!renewer_.joinable()) renewer_ = std::thread([this] { renewUntilStopped(); });
}

void EtcdNodeLease::renewUntilStopped() {
  std::unique_lock lock(mutex_);
  while (!wake_.wait_for(lock, kTtl / 3, [this] { return stopping_; })) {
    try {
      renewOnce();
    } catch (const RendezvousBackendError& e) {
      // Tried again at the next period; the rendezvous reports an unreachable backend on its own.
      spdlog::debug("could not renew this node's etcd lease: {}", e.what());
    }
  }
}

void EtcdNodeLease::renewOnce() {
  if (client_.keepAliveLease(lease_) > 0) return;
  spdlog::warn(
      "this node's etcd lease lapsed (it was not renewed for {} s: this process was paused or etcd was "
      "unreachable); the other nodes count this node as gone; taking a new lease",
      kTtl.count());
  lease_ = client_.grantLease(kTtl);
  client_.put(key_, "1", lease_);
}

}  // namespace ddprun::rendezvous
