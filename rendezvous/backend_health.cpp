#include "rendezvous/backend_health.hpp"

#include <spdlog/spdlog.h>

#include <cstdio>

namespace ddprun::rendezvous {

std::string secondsText(std::chrono::milliseconds ms) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", static_cast<double>(ms.count()) / 1000.0);
  return text;
}

void BackendHealth::contact() {
  if (unreachable_ && reached_) spdlog::info("rendezvous backend reachable again");
  reached_ = true;
  unreachable_ = false;
  lastContact_ = clock_.now();
}

void BackendHealth::failed(const RendezvousBackendError& e) {
  if (clock_.now() - lastContact_ >= liveness_.expiry()) {
    throw RendezvousBackendError("lost the rendezvous backend for " + secondsText(liveness_.expiry()) +
                                 " (keep_alive_interval x keep_alive_max_attempt): " + e.what());
  }
  if (!unreachable_) {
    spdlog::warn("rendezvous backend unreachable; retrying for up to {}: {}", secondsText(liveness_.expiry()),
                 e.what());
  }
  unreachable_ = true;
}

void BackendHealth::retryAfter(const RendezvousBackendError& e, const Deadline& deadline) {
  if (reached_) {
    failed(e);  // lost mid-job: the same rule as a membership check
  } else {
    if (deadline.expired()) {
      throw RendezvousBackendError("could not reach the rendezvous backend within join_timeout (" +
                                   secondsText(joinTimeout_) + "): " + e.what());
    }
    if (!unreachable_ || clock_.now() >= nextWaitLog_) {
      spdlog::info("waiting for the rendezvous backend (until join_timeout): {}", e.what());
      nextWaitLog_ = clock_.now() + std::chrono::seconds(10);
    }
    unreachable_ = true;
  }
  clock_.sleepFor(std::chrono::milliseconds(200));
}

}  // namespace ddprun::rendezvous
