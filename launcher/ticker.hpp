#pragma once
// The agent's one periodic tick, every --monitor-interval, in every job (single-node included): features
// register a task once and it runs on each tick, on the agent's loop (Redis' time events: one timer, many
// tasks). Worker exits do not wait for it: they arrive at once through SIGCHLD.
#include <boost/asio.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ddprun::launcher {

class Ticker {
 public:
  using Task = std::function<void()>;

  Ticker(boost::asio::io_context& io, std::chrono::duration<double> interval);
  /// Adds a task; tasks run in the order they were added. Call before start().
  void add(std::string name, Task task);
  /// Starts ticking (again after stop(): a tick already due from before the stop never runs).
  void start();
  void stop();
  bool running() const { return !stopped_; }
  std::chrono::steady_clock::duration interval() const { return interval_; }

 private:
  void arm();

  boost::asio::steady_timer timer_;
  std::chrono::steady_clock::duration interval_;
  std::vector<std::pair<std::string, Task>> tasks_;
  bool stopped_ = true;
  uint64_t generation_ = 0;  ///< bumped by start(): a wait armed before a stop/start pair is stale
};

}  // namespace ddprun::launcher
