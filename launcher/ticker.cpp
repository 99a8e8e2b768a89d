#include "launcher/ticker.hpp"

namespace ddprun::launcher {

Ticker::Ticker(boost::asio::io_context& io, std::chrono::duration<double> interval)
    : timer_(io), interval_(std::chrono::duration_cast<std::chrono::steady_clock::duration>(interval)) {}

void Ticker::add(std::string name, Task task) { tasks_.emplace_back(std::move(name), std::move(task)); }

void Ticker::start() {
  stopped_ = false;
  ++generation_;
  timer_.expires_after(interval_);
  arm();
}

void Ticker::stop() {
  stopped_ = true;
  timer_.cancel();
}

void Ticker::arm() {
  timer_.async_wait([this, generation = generation_](const boost::system::error_code& ec) {
    if (ec || stopped_ || generation != generation_) return;
    for (auto& [name, task] : tasks_) task();
    // From the previous deadline, not from now: a slow task does not make the tick drift.
    timer_.expires_at(std::max(timer_.expiry() + interval_, std::chrono::steady_clock::now()));
    arm();
  });
}

}  // namespace ddprun::launcher
