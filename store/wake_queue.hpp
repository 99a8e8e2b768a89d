#pragma once
// The STOP_WAITING bytes the store owes its waiting clients, and the order and pace it pays them in. No sockets and
// no clock of its own: the connection manager sends what take() hands out (store/connection_manager.hpp).
#include <chrono>
#include <cstddef>
#include <deque>
#include <optional>
#include <unordered_map>
#include <vector>

#include "store/kv_state.hpp"

namespace ddprun::store {

/// Woken connections not yet told, and those told that have not spoken since. One SET can wake a thousand waiters
/// (every node of a rendezvous waits on the key that closes the round). Told all at once, the thousand threads they
/// wake take the machine's CPUs, each asking the store its next question, while the store's one thread, one runnable
/// thread among a thousand of the same priority, answers a few of them per time slice: on two vCPUs at 1,024 nodes the
/// first node was told its rank 0.3 s after the round closed, all of them within 0.3 s of each other in no useful
/// order. So within one request's wake-ups the oldest connection goes first (connection ids grow with each accepted
/// connection, and the oldest waiter has usually waited longest: a rendezvous node re-registers its bounded WAIT every
/// few seconds, which would otherwise put it at the back), and a crowd larger than `atOnce` (16 per CPU by default;
/// smaller ones are told at once, as before) is told at most kInFlight at a time: the next once a told client sends
/// its next request (or closes), or after patience() (a client that acts on the wake-up without asking anything more
/// holds a place no longer than that). Patience follows how long told clients take to come back (twice the moving
/// average, 2-20 ms; 20 ms until the first comes back): on a busy machine a woken thread waits for a time slice, and
/// a patience of 2 ms let the thousand through anyway (measured: the first told nodes of a 1,024-node rendezvous came
/// back after 15-40 ms). Clients that ask nothing after a wake-up (a TCPStore wait() alone) would be told only
/// kInFlight per patience, so each place patience releases doubles how many may be told at once (up to kMaxInFlight),
/// and a told client that comes back sets it to kInFlight again: 16,384 such waiters are told in about ten steps. Which
/// waiters are woken, and when they stop waiting, is KvState's; only the bytes' order and pace are decided here.
class WakeQueue {
 public:
  using Clock = std::chrono::steady_clock;
  /// How many told clients may be on their way back at once, while they do come back.
  static constexpr size_t kInFlight = 16;
  static constexpr size_t kMaxInFlight = 65536;
  /// Bounds of how long a told client holds its place without a request.
  static constexpr std::chrono::milliseconds kMinPatience{2};
  static constexpr std::chrono::milliseconds kMaxPatience{20};
  /// A client that speaks later than this after its wake-up was not on its way back from it: not counted.
  static constexpr std::chrono::milliseconds kComeBackHorizon{1000};

  /// `atOnce`: a crowd of at most this many (owed and told together) is told at once.
  explicit WakeQueue(size_t atOnce = kInFlight) : atOnce_(atOnce) {}

  /// Owes every connection of `woken` (one request's wake-ups) a STOP_WAITING, after those owed already; within
  /// `woken`, the lowest id (the oldest connection) first. A connection listed twice (a pipelined WAIT and BARRIER
  /// released by one request) is owed two.
  void add(KvState::Woken woken);
  /// The connections to tell now, in order, one entry per byte: all that are owed while the crowd is at most
  /// `atOnce`; otherwise as many as places are free after releasing those told patience() ago or longer, each
  /// holding a place from `now`.
  std::vector<ConnectionId> take(Clock::time_point now);
  /// `connection` sent a request at `now`: it no longer holds a place (how long it took since it was told, place or
  /// not, feeds patience()), and is owed nothing more. Returns how many STOP_WAITING bytes it was still owed (they must
  /// reach it before that request's reply).
  size_t settle(ConnectionId connection, Clock::time_point now);
  /// `connection` closed: forgets it (what it was owed, its place) without counting it as a client that came back.
  void forget(ConnectionId connection);
  /// Whether anyone is still owed a STOP_WAITING.
  bool owing() const { return owedBytes_ > 0; }
  /// Whether take() would hand out a connection now, ignoring patience.
  bool canTell() const { return owing() && (crowd() <= atOnce_ || told_.size() < inFlight_); }
  /// How many told clients may hold a place now.
  size_t inFlight() const { return inFlight_; }
  /// When the earliest place held is released by patience (nothing when no place is held).
  std::optional<Clock::time_point> nextRelease() const;
  /// How long a told client holds its place without a request: twice the moving average of how long told clients
  /// took to come back (weight 1/8 for each new one, counted as at most kMaxPatience; one that spoke after
  /// kComeBackHorizon is not counted), within [kMinPatience, kMaxPatience]; kMaxPatience before any.
  Clock::duration patience() const;

 private:
  size_t crowd() const { return owedBytes_ + told_.size(); }

  size_t atOnce_;
  /// Payment order, one entry per byte; may still name connections settled early (skipped when taken).
  std::deque<ConnectionId> order_;
  /// Bytes owed per connection, and in all.
  std::unordered_map<ConnectionId, size_t> owed_;
  size_t owedBytes_ = 0;
  /// Told, not heard from since, holding a place: when each was told.
  std::unordered_map<ConnectionId, Clock::time_point> told_;
  /// Every connection told and not heard from since (a place held or not): when it was told, for patience().
  std::unordered_map<ConnectionId, Clock::time_point> toldAt_;
  /// Moving average of how long told clients took to send their next request.
  std::optional<Clock::duration> comeBack_;
  size_t inFlight_ = kInFlight;
};

}  // namespace ddprun::store
