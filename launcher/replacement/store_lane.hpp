#pragma once
// The round's workers' store as the agent reaches it without ever waiting on its loop: every call runs on a thread
// of its own, one at a time in order, and its result comes back to the loop as a posted handler. The store may be
// this agent's own (reached over loopback like any worker reaches it) or another node's; either way a store that
// answers slowly or not at all delays only this lane, never signals, exits or the watch. (The design review's "the
// loop never waits" rule: docs/architecture.md.)
#include <boost/asio.hpp>
#include <functional>
#include <memory>
#include <string>

#include "common/cancel_flag.hpp"
#include "store/store.hpp"

namespace ddprun::launcher {

class StoreLane {
 public:
  /// Makes the store client, on the lane's thread (it may connect, bounded by its own timeout); `cancel` is set when
  /// the lane goes away, which must end a WAIT in progress at once.
  using Connect = std::function<std::unique_ptr<store::Store>(const CancelFlag& cancel)>;
  /// A call's work, on the lane's thread.
  using Job = std::function<void(store::Store&)>;
  /// A call's end, on the loop: "" or what went wrong (the store's error text).
  using Done = std::function<void(const std::string& error)>;

  explicit StoreLane(boost::asio::io_context& io);
  /// Ends the call in flight (a WAIT at once, others within the store client's timeout) and drops the rest.
  ~StoreLane();
  StoreLane(const StoreLane&) = delete;
  StoreLane& operator=(const StoreLane&) = delete;

  /// The store of a new attempt: the next call connects through `connect` (the client of the attempt before goes).
  void retarget(Connect connect);
  /// Runs `job` with the store on the lane's thread, then `done` on the loop. A job that throws (the store did not
  /// answer) ends with its text, and the next call connects again.
  void run(Job job, Done done = {});
  /// Calls queued or running, for tests and the shutdown.
  size_t pending() const { return *pending_; }

 private:
  boost::asio::io_context& io_;
  boost::asio::thread_pool thread_{1};
  std::shared_ptr<size_t> pending_ = std::make_shared<size_t>(0);  ///< touched on the loop only
  /// The lane thread's own state: the client and how to make it.
  struct Target {
    CancelFlag cancel;
    Connect connect;
    std::unique_ptr<store::Store> store;
  };
  std::shared_ptr<Target> target_ = std::make_shared<Target>();  ///< touched on the lane's thread only
};

}  // namespace ddprun::launcher
