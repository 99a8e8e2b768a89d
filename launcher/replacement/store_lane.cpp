#include "launcher/replacement/store_lane.hpp"

namespace ddprun::launcher {
namespace asio = boost::asio;

StoreLane::StoreLane(asio::io_context& io) : io_(io) {}

StoreLane::~StoreLane() {
  target_->cancel = true;  // a WAIT in progress ends at once
  thread_.stop();          // queued calls are dropped; the one running ends within its client's timeout
  thread_.join();
}

void StoreLane::retarget(Connect connect) {
  asio::post(thread_, [target = target_, connect = std::move(connect)]() mutable {
    target->store.reset();
    target->connect = std::move(connect);
  });
}

void StoreLane::run(Job job, Done done) {
  ++*pending_;
  asio::post(thread_, [this, target = target_, job = std::move(job), done = std::move(done)]() mutable {
    std::string error;
    try {
      if (!target->store) {
        if (!target->connect) throw std::runtime_error("no workers' store in this attempt");
        target->store = target->connect(target->cancel);
      }
      job(*target->store);
    } catch (const std::exception& e) {
      error = e.what();
      target->store.reset();  // a client that failed may be mid-reply: the next call starts afresh
    }
    asio::post(io_, [pending = pending_, done = std::move(done), error] {
      --*pending;
      if (done) done(error);
    });
  });
}

}  // namespace ddprun::launcher
