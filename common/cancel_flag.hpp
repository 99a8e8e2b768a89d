#pragma once
// A stop request that blocking waits can sleep on instead of polling: setting it (from any thread: a signal's
// handler on the agent's loop, a test) runs every waker registered meanwhile, so a WAIT on the store ends at once
// and an idle node's threads wake only when there is something to do.
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>

namespace ddprun {

class CancelFlag {
 public:
  /// Unregisters its waker when it goes away; after that the waker is never called.
  class Subscription {
   public:
    Subscription() = default;
    Subscription(const CancelFlag* flag, uint64_t id) : flag_(flag), id_(id) {}
    Subscription(Subscription&& other) noexcept : flag_(other.flag_), id_(other.id_) { other.flag_ = nullptr; }
    Subscription& operator=(Subscription&&) = delete;
    Subscription(const Subscription&) = delete;
    ~Subscription();

   private:
    const CancelFlag* flag_ = nullptr;
    uint64_t id_ = 0;
  };

  explicit CancelFlag(bool set = false) : value_(set) {}
  CancelFlag(const CancelFlag&) = delete;
  CancelFlag& operator=(const CancelFlag&) = delete;

  /// true: sets the flag and runs every registered waker (on this thread); false: clears it.
  CancelFlag& operator=(bool value);
  operator bool() const { return value_.load(); }  // NOLINT(google-explicit-constructor): reads as the flag it was

  /// Calls `wake` when the flag is set, for as long as the returned subscription lives. `wake` runs on the
  /// setting thread with the flag's lock held: it must be short and must not touch this flag (post to a loop).
  [[nodiscard]] Subscription onSet(std::function<void()> wake) const;

 private:
  std::atomic<bool> value_;
  mutable std::mutex mutex_;
  mutable std::map<uint64_t, std::function<void()>> wakers_;
  mutable uint64_t nextId_ = 1;
};

}  // namespace ddprun
