#include "worker/comm/shm_group.hpp"

#include <linux/futex.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstring>
#include <ctime>

namespace ddprun::worker {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kMagic = 0x6d68732d6e757270ull;  // "prun-shm", little-endian
constexpr uint32_t kVersion = 1;
constexpr size_t kPage = 4096;
constexpr size_t kStateBytes = 256;
constexpr size_t kShareAlignBytes = 64;  // shares start on cache-line boundaries
/// How long a waiting rank sleeps on the futex before it looks at its peers again (abort, exit, deadline): the
/// longest a peer's death can go unseen. A dead peer never wakes the futex, so at 100 ms every rank replacement and
/// group restart waited up to 100 ms for the survivors to notice; at 10 ms a long wait costs 100 wake-ups a
/// second (a few microseconds each).
constexpr auto kWaitSlice = std::chrono::milliseconds(10);
/// The largest piece a broadcast moves at a time (see ShmGroup::broadcast).
constexpr size_t kBroadcastChunk = size_t{128} << 10;

/// The control block at offset 0, written by the creator before the segment's name is published.
struct Control {
  uint64_t magic;
  uint32_t version;
  uint32_t ranks;
  uint64_t slotBytes;
  uint64_t nonce;
  std::atomic<uint32_t> abortedBy;  ///< 0, or 1 + the local rank that gave the group up first
};

/// One rank's state block.
struct RankState {
  std::atomic<uint32_t> arrived;  ///< phases completed: the futex word peers wait on
  std::atomic<uint32_t> waiters;  ///< peers sleeping (or about to) on `arrived`
  std::atomic<int32_t> pid;       ///< set at attach
  uint32_t reserved;
  std::atomic<uint64_t> pidNamespace;  ///< inode of /proc/self/ns/pid: pids compare only within one namespace
  char reason[200];                    ///< why this rank gave up the group (abort)
};
static_assert(sizeof(RankState) <= kStateBytes, "state block too large");

size_t roundUp(size_t value, size_t to) { return (value + to - 1) / to * to; }
size_t slotsOffset(int ranks) { return roundUp(kPage + static_cast<size_t>(ranks) * kStateBytes, kPage); }

Control* controlOf(const ShmSegment& segment) { return static_cast<Control*>(segment.data()); }
RankState* stateOf(const ShmSegment& segment, int rank) {
  return reinterpret_cast<RankState*>(static_cast<char*>(segment.data()) + kPage +
                                      static_cast<size_t>(rank) * kStateBytes);
}

void futexWait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds timeout) {
  const auto ns = std::max<int64_t>(timeout.count(), 0);
  timespec relative{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  // Not FUTEX_PRIVATE: the word is shared between processes. EAGAIN (changed), EINTR, ETIMEDOUT: re-check.
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &relative, nullptr, 0);
}

void futexWakeAll(std::atomic<uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

uint64_t ownPidNamespace() {
  struct stat info {};
  return ::stat("/proc/self/ns/pid", &info) == 0 ? static_cast<uint64_t>(info.st_ino) : 0;
}

/// A pidfd for `pid` (becomes readable when the process exits), or -1 where the kernel has none.
int openPidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

std::string seconds(std::chrono::milliseconds ms) {
  const auto s = ms.count() / 1000.0;
  char text[32];
  std::snprintf(text, sizeof text, "%g", s);
  return text;
}

}  // namespace

size_t ShmGroup::segmentBytes(int ranks, size_t slotBytes) {
  return slotsOffset(ranks) + 2 * static_cast<size_t>(ranks) * slotBytes;
}

ShmGroup::ShmGroup(ShmSegment segment, int rank, std::vector<int> globalRanks, uint64_t nonce, ShmGroupOptions options)
    : segment_(std::move(segment)),
      rank_(rank),
      size_(static_cast<int>(globalRanks.size())),
      globalRanks_(std::move(globalRanks)),
      options_(options),
      pidfds_(static_cast<size_t>(size_), -1),
      pidNamespace_(ownPidNamespace()) {
  options_.slotBytes = roundUp(options_.slotBytes, kShareAlignBytes);
  if (segment_.size() != segmentBytes(size_, options_.slotBytes)) {
    throw Error("backend shm: segment " + segment_.name() + " has the wrong size for " + std::to_string(size_) +
                " ranks");
  }
  Control* control = controlOf(segment_);
  if (rank_ == 0) {
    control->magic = kMagic;
    control->version = kVersion;
    control->ranks = static_cast<uint32_t>(size_);
    control->slotBytes = options_.slotBytes;
    control->nonce = nonce;
  } else if (control->magic != kMagic || control->version != kVersion ||
             control->ranks != static_cast<uint32_t>(size_) || control->slotBytes != options_.slotBytes ||
             control->nonce != nonce) {
    throw Error("backend shm: segment " + segment_.name() +
                " does not hold the group announced in the store "
                "(another job's, or damaged): refusing to use it");
  }
}

void ShmGroup::attach() {
  RankState* mine = stateOf(segment_, rank_);
  mine->pid.store(static_cast<int32_t>(::getpid()));
  mine->pidNamespace.store(pidNamespace_);
  ++collectives_;
  arrive();
  waitForAll("the group's start");
  segment_.unlink();  // every rank has mapped it: nothing is left in /dev/shm, whatever happens next
}

ShmGroup::~ShmGroup() {
  for (int fd : pidfds_) {
    if (fd >= 0) ::close(fd);
  }
}

void* ShmGroup::slot(int buffer, int rank) const {
  const size_t index = static_cast<size_t>(buffer) * static_cast<size_t>(size_) + static_cast<size_t>(rank);
  return static_cast<char*>(segment_.data()) + slotsOffset(size_) + index * options_.slotBytes;
}

void ShmGroup::arrive() {
  RankState* mine = stateOf(segment_, rank_);
  mine->arrived.store(++phase_, std::memory_order_seq_cst);
  if (mine->waiters.load(std::memory_order_seq_cst) > 0) futexWakeAll(&mine->arrived);
}

void ShmGroup::waitForAll(const char* op) {
  const auto deadline = Clock::now() + options_.timeout;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer != rank_) waitFor(peer, phase_, op, deadline);
  }
}

void ShmGroup::waitFor(int peer, uint32_t phase, const char* op, Clock::time_point deadline) {
  std::atomic<uint32_t>& word = stateOf(segment_, peer)->arrived;
  auto reached = [&] { return static_cast<int32_t>(word.load(std::memory_order_acquire) - phase) >= 0; };
  const auto spinEnd = Clock::now() + options_.spin;
  do {
    for (int i = 0; i < 64; ++i) {
      if (reached()) return;
      cpuRelax();
    }
  } while (Clock::now() < spinEnd);
  std::atomic<uint32_t>& waiters = stateOf(segment_, peer)->waiters;
  for (;;) {
    checkGroup(peer, op, deadline);
    waiters.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t seen = word.load(std::memory_order_seq_cst);
    if (static_cast<int32_t>(seen - phase) < 0) {
      futexWait(&word, seen, std::min<Clock::duration>(kWaitSlice, deadline - Clock::now()));
    }
    waiters.fetch_sub(1, std::memory_order_seq_cst);
    if (reached()) return;
  }
}

void ShmGroup::checkGroup(int peer, const char* op, Clock::time_point deadline) {
  const std::string what = std::string(op) + " (collective " + std::to_string(collectives_) + ")";
  if (cancelled_.load())
    throw CollectiveError("backend shm: rank " + std::to_string(globalRanks_[rank_]) + " is shutting down during " +
                          what);
  if (const uint32_t by = controlOf(segment_)->abortedBy.load(); by != 0 && by != static_cast<uint32_t>(rank_ + 1)) {
    const RankState* quitter = stateOf(segment_, static_cast<int>(by - 1));
    fail("backend shm: rank " + std::to_string(globalRanks_[by - 1]) + " gave the group up during " + what + ": " +
         std::string(quitter->reason, strnlen(quitter->reason, sizeof quitter->reason)));
  }
  if (peerGone(peer)) {
    fail("backend shm: rank " + std::to_string(globalRanks_[peer]) + " (pid " +
         std::to_string(stateOf(segment_, peer)->pid.load()) + ") exited during " + what +
         "; the group cannot continue");
  }
  if (Clock::now() >= deadline) {
    fail("backend shm: rank " + std::to_string(globalRanks_[peer]) + " did not reach " + what + " within " +
         seconds(options_.timeout) + " s (hung, stalled or killed?)");
  }
}

bool ShmGroup::peerGone(int peer) {
  const RankState* state = stateOf(segment_, peer);
  const int32_t pid = state->pid.load();
  const uint64_t ns = state->pidNamespace.load();
  if (pid <= 0 || ns == 0 || ns != pidNamespace_) return false;  // not attached yet, or pids not comparable
  int& fd = pidfds_[static_cast<size_t>(peer)];
  if (fd < 0) {
    fd = openPidfd(pid);
    if (fd < 0) return errno == ESRCH || (errno == ENOSYS && ::kill(pid, 0) != 0 && errno == ESRCH);
  }
  pollfd entry{fd, POLLIN, 0};
  return ::poll(&entry, 1, 0) > 0;  // a pidfd turns readable when its process has exited
}

void ShmGroup::fail(const std::string& message) {
  abort(message);
  throw CollectiveError(message);
}

void ShmGroup::abort(const std::string& reason) {
  RankState* mine = stateOf(segment_, rank_);
  std::memset(mine->reason, 0, sizeof mine->reason);
  std::memcpy(mine->reason, reason.data(), std::min(reason.size(), sizeof mine->reason - 1));
  uint32_t none = 0;
  controlOf(segment_)->abortedBy.compare_exchange_strong(none, static_cast<uint32_t>(rank_ + 1));
  for (int r = 0; r < size_; ++r) futexWakeAll(&stateOf(segment_, r)->arrived);
}

void ShmGroup::cancel() {
  cancelled_.store(true);
  for (int r = 0; r < size_; ++r) futexWakeAll(&stateOf(segment_, r)->arrived);
}

void ShmGroup::allreduceSum(void* data, size_t count, ShmDtype dtype) {
  ++collectives_;
  const size_t elem = dtypeSize(dtype);
  const size_t chunkElems = options_.slotBytes / elem;
  const size_t align = kShareAlignBytes / elem;
  auto* bytes = static_cast<char*>(data);
  std::vector<const void*> sources(static_cast<size_t>(size_));
  for (size_t done = 0; done < count; done += chunkElems) {
    const size_t n = std::min(chunkElems, count - done);
    const int buffer = static_cast<int>(chunks_++ % 2);
    const size_t per = roundUp((n + static_cast<size_t>(size_) - 1) / static_cast<size_t>(size_), align);
    auto shareOf = [&](int r) {
      const size_t lo = std::min(n, static_cast<size_t>(r) * per);
      return std::make_pair(lo, std::min(n, lo + per));
    };
    std::memcpy(slot(buffer, rank_), bytes + done * elem, n * elem);
    arrive();
    waitForAll("allreduce");
    const auto [lo, hi] = shareOf(rank_);
    if (hi > lo) {
      for (int r = 0; r < size_; ++r) sources[static_cast<size_t>(r)] = static_cast<char*>(slot(buffer, r)) + lo * elem;
      sumInto(dtype, static_cast<char*>(slot(buffer, rank_)) + lo * elem, sources.data(), size_, hi - lo);
    }
    arrive();
    waitForAll("allreduce");
    for (int r = 0; r < size_; ++r) {
      const auto [from, to] = shareOf(r);
      std::memcpy(bytes + (done + from) * elem, static_cast<char*>(slot(buffer, r)) + from * elem, (to - from) * elem);
    }
  }
}

void ShmGroup::broadcast(void* data, size_t bytes, int root) {
  ++collectives_;
  auto* out = static_cast<char*>(data);
  // Chunks of at most kBroadcastChunk, through the root's slots of the two buffers: a broadcast is rare (the start,
  // a rank replacement's state) and comes first in a new group, where each 4 KiB page a process touches the first
  // time costs a fault (tens of microseconds on a VM); 2 x 128 KiB instead of up to 2 x slotBytes of pages.
  const size_t chunk = std::min(options_.slotBytes, kBroadcastChunk);
  for (size_t done = 0; done < bytes; done += chunk) {
    const size_t n = std::min(chunk, bytes - done);
    const int buffer = static_cast<int>(chunks_++ % 2);
    if (rank_ == root) std::memcpy(slot(buffer, root), out + done, n);
    arrive();
    waitForAll("broadcast");
    if (rank_ != root) std::memcpy(out + done, slot(buffer, root), n);
    arrive();
    waitForAll("broadcast");
  }
}

void ShmGroup::barrier() {
  ++collectives_;
  arrive();
  waitForAll("barrier");
}

}  // namespace ddprun::worker
