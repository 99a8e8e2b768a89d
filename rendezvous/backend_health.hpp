#pragma once
// How a dynamic rendezvous treats an unreachable backend, shared by both protocols (DynamicRendezvous on one
// compare-and-set value, TicketRendezvous on a key per node): before the backend was ever reached it may
// simply not be up yet (the store's host starts later), so joining keeps trying until join_timeout; once
// reached, it is "lost" after the liveness expiry (keep_alive_interval x keep_alive_max_attempt) without
// contact, as torch's RendezvousConnectionError ends a job.
#include <chrono>
#include <string>

#include "common/clock.hpp"
#include "rendezvous/rendezvous_backend.hpp"

namespace ddprun::rendezvous {

class BackendHealth {
 public:
  BackendHealth(Clock& clock, LivenessSettings liveness, std::chrono::milliseconds joinTimeout)
      : clock_(clock), liveness_(liveness), joinTimeout_(joinTimeout), lastContact_(clock.now()) {}

  /// A successful exchange with the backend (says so after an outage).
  void contact();
  /// A failed exchange: throws RendezvousBackendError "lost the rendezvous backend for …" once the backend
  /// has been unreachable for the liveness expiry (warns once at the start of an outage).
  void failed(const RendezvousBackendError& e);
  /// A failed exchange inside a join or another operation bounded by `deadline`: before the backend was
  /// ever reached, throws when `deadline` has passed (logging every 10 s while it waits); afterwards, as
  /// failed(). Then sleeps a short retry pause (200 ms) on the clock.
  void retryAfter(const RendezvousBackendError& e, const Deadline& deadline);

 private:
  Clock& clock_;
  LivenessSettings liveness_;
  std::chrono::milliseconds joinTimeout_;
  Clock::TimePoint lastContact_;
  bool unreachable_ = false;
  bool reached_ = false;
  Clock::TimePoint nextWaitLog_{};  // one line per 10 s while waiting for a backend never reached
};

/// "1.5 s", for messages.
std::string secondsText(std::chrono::milliseconds ms);

}  // namespace ddprun::rendezvous
