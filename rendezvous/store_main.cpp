// ddprun-store: the rendezvous store as a standalone server (for benchmarks, tests, and users who want a
// TCPStore-compatible server without a launcher).
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <boost/asio.hpp>
#include <iostream>

#include "rendezvous/store_server.hpp"

int main(int argc, char** argv) {
  CLI::App app{"ddprun-store: a TCPStore-compatible key-value server (torch 1.13 and 2.x clients)"};
  std::string host = "127.0.0.1";
  int port = 29500;
  std::string logLevel = "info";
  app.add_option("--host", host, "address to bind (0.0.0.0 for all interfaces)")->capture_default_str();
  app.add_option("--port", port, "TCP port (0: a free one, printed at start)")->check(CLI::Range(0, 65535))
      ->capture_default_str();
  app.add_option("--log-level", logLevel)->check(CLI::IsMember({"debug", "info", "warn", "error"}))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "ddprun-store: " << e.what() << " (see --help)\n";
    return 2;
  }
  spdlog::set_level(spdlog::level::from_str(logLevel));
  try {
    boost::asio::io_context io;
    ddprun::rendezvous::StoreServerOptions options;
    options.host = host;
    options.port = static_cast<uint16_t>(port);
    ddprun::rendezvous::StoreServer server(io, options);
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
