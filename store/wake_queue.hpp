#pragma once
// The STOP_WAITING bytes the store owes its waiting clients, and the order and pace it pays them in. No sockets and
// no clock of its own: the connection manager sends what take() hands out (store/connection_manager.hpp).
#include <chrono>
#include <cstddef>
#include <deque>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "store/kv_state.hpp"

namespace ddprun::store {

/// Woken connections not yet told, and those told that have not spoken since. One SET can wake a thousand waiters
/// (every node of a rendezvous waits on the key that closes the round). Told all at once, the thousand threads they
/// wake take the machine's CPUs, each asking the store its next question, while the store's one thread, one runnable
/// thread among a thousand of the same priority, answers a few of them per time slice: on two vCPUs at 1,024 nodes the
/// first node was told its rank 0.3 s after the round closed, all of them within 0.3 s of each other in no useful
/// order. So the store tells at most kInFlight clients at a time: the next one once a told client sends its next
/// request (or closes), or after patience() (a client that acts on the wake-up without asking anything more holds a
/// place no longer than that); and within one request's wake-ups the oldest connection first: connection ids grow
/// with each accepted connection, and the oldest waiter has usually waited longest (a rendezvous node re-registers
/// its bounded WAIT every few seconds, which would otherwise put it at the back). Patience follows how long told
/// clients take to come back (twice the moving average, 2-100 ms): on a busy machine a woken thread waits for a
/// time slice, and a fixed 2 ms let the thousand through anyway. Clients that ask nothing after a wake-up (a
/// TCPStore wait() alone) would be told only kInFlight per patience, so each place patience releases doubles how
/// many may be told at once (up to kMaxInFlight), and a told client that comes back sets it to kInFlight again:
/// 16,384 such waiters are told in about ten steps instead of a thousand.
/// Which waiters are woken, and when they stop waiting, is KvState's; only the bytes' order and pace are decided here.
class WakeQueue {
 public:
  using Clock = std::chrono::steady_clock;
  /// How many told clients may be on their way back at once, while they do come back.
  static constexpr size_t kInFlight = 16;
  static constexpr size_t kMaxInFlight = 65536;
  /// Bounds of how long a told client holds its place without a request.
  static constexpr std::chrono::milliseconds kMinPatience{2};
  static constexpr std::chrono::milliseconds kMaxPatience{100};

  /// Owes every connection of `woken` (one request's wake-ups, each connection once) a STOP_WAITING, after those
  /// owed already; within `woken`, the lowest id (the oldest connection) first.
  void add(KvState::Woken woken);
  /// The connections to tell now, in order (as many as places are free after releasing those told patience() ago
  /// or longer); each holds a place from `now`.
  std::vector<ConnectionId> take(Clock::time_point now);
  /// `connection` sent a request or closed at `now`: it no longer holds a place (how long it took feeds patience()),
  /// and is owed nothing more. Returns whether it was still owed its STOP_WAITING (which must then reach it before
  /// that request's reply).
  bool settle(ConnectionId connection, Clock::time_point now);
  /// How long a told client holds its place without a request: twice the moving average of how long told clients
  /// took to come back (weight 1/8 for each new one; one that took over kMaxPatience is not counted), within
  /// [kMinPatience, kMaxPatience]; kMinPatience before any.
  Clock::duration patience() const;
  /// Whether anyone is still owed a STOP_WAITING.
  bool owing() const { return !owed_.empty(); }
  /// Whether take() would hand out a connection now (someone is owed and a place is free, ignoring patience).
  bool canTell() const { return !owed_.empty() && told_.size() < inFlight_; }
  /// How many told clients may hold a place now.
  size_t inFlight() const { return inFlight_; }
  /// When the earliest place held is released by patience (nothing when no place is held).
  std::optional<Clock::time_point> nextRelease() const;

 private:
  /// Payment order; may still name connections settled early (skipped when taken).
  std::deque<ConnectionId> order_;
  std::unordered_set<ConnectionId> owed_;
  /// Told, not heard from since: when each was told.
  std::unordered_map<ConnectionId, Clock::time_point> told_;
  /// Moving average of how long told clients took to send their next request.
  std::optional<Clock::duration> comeBack_;
  size_t inFlight_ = kInFlight;
};

}  // namespace ddprun::store
