// ddprun-store: ddprun's store as a standalone TCPStore server. Any torch job can use it in place of the
// server its rank 0 would start (MASTER_ADDR/MASTER_PORT with TORCHELASTIC_USE_AGENT_STORE=True), and
// benchmarks and tests start it alone.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <boost/asio.hpp>
#include <cerrno>
#include <cstdlib>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "common/version_text.hpp"
#include "store/store_server.hpp"

namespace {

constexpr const char* kDescription =
    "ddprun-store: a standalone TCPStore server, usable by any torch job (not only ddprun).\n"
    "It speaks PyTorch's TCPStore wire protocol in both dialects, told apart per connection: torch 1.13 and\n"
    "torch 2.x (VALIDATE handshake, CANCEL_WAIT, MULTI_GET/MULTI_SET, APPEND, queues, BARRIER), so stock\n"
    "LibTorch and Python clients connect to it as to the server rank 0 would start. Point a job at it with\n"
    "MASTER_ADDR/MASTER_PORT and TORCHELASTIC_USE_AGENT_STORE=True (then no rank starts its own server).\n"
    "Every size and every buffered byte is bounded (flags below); a client that breaks a limit loses its own\n"
    "connection, with one log line naming the limit and the client, and everyone else is served on.";

/// A limit: decimal digits naming 1..2^64-1. CLI11's own conversion wraps "-1" and ignores an overflow.
const CLI::Validator positiveCount(
    [](std::string& text) -> std::string {
      const bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
      errno = 0;
      const unsigned long long n = digits ? std::strtoull(text.c_str(), nullptr, 10) : 0;
      if (!digits || errno == ERANGE || n == 0)
        return "'" + text + "' is not a whole number in 1..18446744073709551615";
      return "";
    },
    "POSITIVE");

/// Flags earlier versions took, and why they went: one given is named as retired, where CLI11 would only say that
/// it and its value "were not expected".
constexpr std::pair<const char*, const char*> kRetiredFlags[] = {
    {"--wake-at-once", "waiters are woken at once, as c10d's TCPStore server does"},
};

/// The line for the first retired flag among `args` ("--flag" or "--flag=value"), or "".
std::string retiredFlagIn(const std::vector<std::string>& args) {
  for (const std::string& arg : args) {
    for (const auto& [flag, why] : kRetiredFlags) {
      const std::string name = flag;
      if (arg == name || arg.rfind(name + "=", 0) == 0) return name + " is retired (" + why + "); leave it out";
    }
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  if (const std::string retired = retiredFlagIn({argv + 1, argv + argc}); !retired.empty()) {
    std::cerr << "ddprun-store: " << retired << "\n";
    return 2;
  }
  CLI::App app{kDescription};
  std::string host = "127.0.0.1";
  int port = 29500;
  std::string logLevel = "info";
  ddprun::store::StoreLimits limits;
  app.set_version_flag("--version", ddprun::versionText("ddprun-store"));
  app.add_option("--host", host, "address to bind (0.0.0.0 for all interfaces)")->capture_default_str();
  app.add_option("--port", port, "TCP port (0: a free one, printed at start)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  app.add_option("--log-level", logLevel)
      ->check(CLI::IsMember({"debug", "info", "warn", "error"}))
      ->capture_default_str();
  for (const auto& field : ddprun::store::limitFields()) {
    app.add_option("--" + std::string(field.name), limits.*field.field, field.help)
        ->check(positiveCount)
        ->capture_default_str()
        ->group("Limits");
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "ddprun-store: " << e.what() << " (see --help)\n";
    return 2;
  }
  spdlog::set_level(spdlog::level::from_str(logLevel));
  try {
    boost::asio::io_context io;
    ddprun::store::StoreServerOptions options;
    options.host = host;
    options.port = static_cast<uint16_t>(port);
    options.limits = limits;
    ddprun::store::StoreServer server(io, options);
    boost::asio::signal_set signals(io, SIGINT, SIGTERM);
    signals.async_wait([&](const boost::system::error_code&, int) {
      server.stop();
      io.stop();
    });
    std::cout << "ddprun-store listening on " << host << ":" << server.port() << std::endl;
    io.run();
  } catch (const std::exception& e) {
    std::cerr << "ddprun-store: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
