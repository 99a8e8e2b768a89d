#pragma once
// The collectives of the shm backend over one shared-memory segment, among the ranks of one host. This is
// the mechanism; ShmCommunicator adds the store bootstrap, tensors and the helper thread. LibTorch-free.
//
// Segment layout (all offsets fixed by the rank count and the slot size, checked by every rank at attach):
//   [control block: magic, version, ranks, slot bytes, nonce, abort mark]  one page
//   [one 256-byte state block per rank: `arrived` phase counter (a futex word), waiter count, pid, reason]
//   [2 buffers x ranks x slot bytes of data slots]                         page-aligned
// Synchronisation: each rank counts the phases it has completed in its own `arrived` word; waiting for a
// phase means waiting until every peer's counter reached it: a short spin, then futex waits in slices of
// at most 100 ms, between which the waiter checks the abort mark, whether the peer's process still exists
// (a pidfd) and the timeout. Nothing ever waits without a deadline.
//
// allreduce (sum), per chunk of at most one slot: every rank copies its chunk into its slot of buffer
// (chunk mod 2), phase; rank r sums share r of all slots into its own slot (reduce-scatter: every rank sums
// an equal share), phase; every rank copies all shares out (all-gather). The two buffers alternate, so a
// slot is rewritten only after every rank passed the phase that follows its last read: two phases per
// chunk. Each element is summed by one rank, in rank order 0..n-1, so every rank gets identical bits.
// After DeepSpeed's CPU shared-memory allreduce (csrc/cpu/comm/shm.cpp), written anew: futex waits with
// deadlines instead of unbounded spins, liveness and abort checks, and an exclusive 0600 segment.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "worker/comm/shm_reduce.hpp"
#include "worker/comm/shm_segment.hpp"

namespace ddprun::worker {

/// A collective that cannot complete: a peer died, hung past the timeout, or gave up the group.
class CollectiveError : public Error {
 public:
  using Error::Error;
};

/// Tuning and limits of one group.
struct ShmGroupOptions {
  std::chrono::milliseconds timeout{300000};  ///< longest wait for a peer in any phase
  std::chrono::microseconds spin{30};         ///< busy-wait before sleeping on the futex
  size_t slotBytes = size_t{1} << 20;         ///< bytes per rank and buffer; larger tensors go in chunks
};

class ShmGroup {
 public:
  /// Bytes of the segment for `ranks` ranks and `slotBytes` per slot.
  static size_t segmentBytes(int ranks, size_t slotBytes);

  /// Rank `rank` of the group on `segment` (of segmentBytes(globalRanks.size(), options.slotBytes) bytes).
  /// Rank 0, the segment's creator, writes the control block (so do this before publishing its name); the
  /// others check it against `nonce`, the rank count and the slot size, and throw Error when it does not
  /// match. `globalRanks[i]` is local rank i's rank in the job, for messages.
  ShmGroup(ShmSegment segment, int rank, std::vector<int> globalRanks, uint64_t nonce, ShmGroupOptions options);

  /// Announces this rank (its pid) and waits, at most options.timeout, until every rank has; then the
  /// creator removes the segment's name. Throws CollectiveError naming a rank that did not attach.
  void attach();
  ~ShmGroup();
  ShmGroup(const ShmGroup&) = delete;
  ShmGroup& operator=(const ShmGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  /// In-place sum of `count` elements at `data` over all ranks.
  void allreduceSum(void* data, size_t count, ShmDtype dtype);
  /// Copies `bytes` bytes at `data` from local rank `root` to every rank.
  void broadcast(void* data, size_t bytes, int root);
  /// Returns once every rank has entered it.
  void barrier();

  /// Marks the group broken with `reason` so that every peer's current or next wait fails at once.
  void abort(const std::string& reason);
  /// Makes this rank's current or next wait fail within one wait slice (for shutdown from another thread).
  void cancel();

 private:
  struct Layout;
  void arrive();
  void waitForAll(const char* op);
  void waitFor(int peer, uint32_t phase, const char* op, std::chrono::steady_clock::time_point deadline);
  void checkGroup(int peer, const char* op, std::chrono::steady_clock::time_point deadline);
  [[noreturn]] void fail(const std::string& message);
  void openPeerHandles();
  bool peerGone(int peer);
  void* slot(int buffer, int rank) const;

  ShmSegment segment_;
  int rank_;
  int size_;
  std::vector<int> globalRanks_;
  ShmGroupOptions options_;
  uint32_t phase_ = 0;        ///< phases this rank has completed
  uint64_t chunks_ = 0;       ///< chunks moved so far (buffer = chunks_ % 2)
  uint64_t collectives_ = 0;  ///< collectives started (for messages)
  std::vector<int> pidfds_;   ///< per peer: a pidfd once opened, else -1
  uint64_t pidNamespace_;     ///< this process's pid namespace (inode), 0 when unknown
  std::atomic<bool> cancelled_{false};
};

}  // namespace ddprun::worker
