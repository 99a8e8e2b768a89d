#include "launcher/process/logging.hpp"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <mutex>

#include "launcher/process/console_writer.hpp"

namespace ddprun::launcher {
namespace {

/// spdlog sink that hands each formatted line to consoleErr(), so ddprun's own log lines never block the
/// loop either. Colours are left out: a terminal and a pipe get the same bytes.
class ConsoleSink : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t formatted;
    formatter_->format(msg, formatted);
    consoleErr().write(ConsoleWriter::kSelf, std::string_view(formatted.data(), formatted.size()), false);
  }
  void flush_() override {}
};

}  // namespace

void installConsoleLogger() {
  auto logger = std::make_shared<spdlog::logger>("ddprun", std::make_shared<ConsoleSink>());
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [ddprun] [%l] %v");
}

}  // namespace ddprun::launcher
