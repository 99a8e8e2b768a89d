#include "worker/log_setup.hpp"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <memory>
#include <mutex>

#include "common/env.hpp"

namespace ddprun::worker {
namespace {

/// Writes lines below `warn` to stdout and the rest to stderr, each flushed at once (a worker's output is
/// usually a pipe to its launcher, and a line must not wait in a buffer when the process dies).
class SplitStreamSink : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    std::FILE* stream = msg.level >= spdlog::level::warn ? stderr : stdout;
    std::fwrite(line.data(), 1, line.size(), stream);
    std::fflush(stream);
  }
  void flush_() override {
    std::fflush(stdout);
    std::fflush(stderr);
  }
};

}  // namespace

void configureLogging(const std::string& rank) {
  auto logger = std::make_shared<spdlog::logger>("worker", std::make_shared<SplitStreamSink>());
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [worker rank " + rank + "] [%l] %v");
  if (auto level = getEnv("DDPRUN_LOG_LEVEL")) logger->set_level(spdlog::level::from_str(*level));
  spdlog::set_default_logger(std::move(logger));
}

}  // namespace ddprun::worker
