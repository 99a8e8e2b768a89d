#include "worker/log_setup.hpp"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>

#include "common/env.hpp"
#include "common/log_level.hpp"

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
  const auto text = getEnv("DDPRUN_LOG_LEVEL");
  const auto level = text ? parseLogLevel(*text) : std::nullopt;
  if (level) logger->set_level(*level);
  spdlog::set_default_logger(std::move(logger));
  if (text && !level) {
    spdlog::warn("DDPRUN_LOG_LEVEL={}: not a log level (debug, info, warning, error, critical); keeping info", *text);
  }
}

}  // namespace ddprun::worker
