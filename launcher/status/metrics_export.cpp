#include "launcher/status/metrics_export.hpp"

#include <spdlog/spdlog.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <stdexcept>

#include "common/atomic_file.hpp"
#include "common/error.hpp"
#include "launcher/status/metrics_text.hpp"

namespace ddprun::status {
namespace beast = boost::beast;
namespace http = beast::http;

PushTarget parsePushUrl(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind("https://", 0) == 0) {
    throw std::invalid_argument("https is not supported: give the Pushgateway's http:// address");
  }
  if (url.rfind(scheme, 0) != 0) throw std::invalid_argument("expected http://HOST[:PORT][/PATH], got '" + url + "'");
  PushTarget target;
  const std::string rest = url.substr(scheme.size());
  const size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  if (slash != std::string::npos) target.path = rest.substr(slash);
  if (!authority.empty() && authority.front() == '[') {  // [IPv6]:port
    const size_t close = authority.find(']');
    if (close == std::string::npos) throw std::invalid_argument("an unclosed '[' in '" + url + "'");
    target.host = authority.substr(1, close - 1);
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') throw std::invalid_argument("expected ':' after ']' in '" + url + "'");
      target.port = authority.substr(close + 2);
    }
  } else {
    const size_t colon = authority.rfind(':');
    target.host = authority.substr(0, colon);
    if (colon != std::string::npos) target.port = authority.substr(colon + 1);
  }
  if (target.host.empty()) throw std::invalid_argument("no host in '" + url + "'");
  if (target.port.empty() || target.port.find_first_not_of("0123456789") != std::string::npos ||
      target.port.size() > 5 || std::stoi(target.port) > 65535) {
    throw std::invalid_argument("bad port in '" + url + "'");
  }
  return target;
}

void writeMetricsTextfile(const std::string& path, const std::string& text) { writeFileAtomically(path, text); }

void pushMetrics(const PushTarget& target, const std::string& node, const std::string& text,
                 std::chrono::milliseconds timeout) {
  const std::string path =
      target.path.empty() || target.path == "/" ? "/metrics/job/ddprun/instance/" + node : target.path;
  boost::asio::io_context io;
  beast::tcp_stream stream(io);
  stream.expires_after(timeout);  // the whole exchange: resolve, connect, write, read
  boost::asio::ip::tcp::resolver resolver(io);
  beast::error_code ec;
  const auto endpoints = resolver.resolve(target.host, target.port, ec);
  if (ec) throw Error("cannot resolve " + target.host + ": " + ec.message());
  http::request<http::string_body> request{http::verb::put, path, 11};
  request.set(http::field::host, target.host);
  request.set(http::field::content_type, "text/plain; version=0.0.4");
  request.body() = text;
  request.prepare_payload();
  http::response<http::string_body> response;
  beast::flat_buffer buffer;
  stream.async_connect(endpoints, [&](beast::error_code e, const auto&) {
    if (e) {
      ec = e;
      return;
    }
    http::async_write(stream, request, [&](beast::error_code e2, size_t) {
      if (e2) {
        ec = e2;
        return;
      }
      http::async_read(stream, buffer, response, [&](beast::error_code e3, size_t) { ec = e3; });
    });
  });
  io.run();
  const std::string where = target.host + ":" + target.port + path;
  if (ec) throw Error("no answer from " + where + ": " + ec.message());
  if (response.result_int() / 100 != 2) {
    const std::string body = response.body();
    throw Error(where + " answered " + std::to_string(response.result_int()) + ": " + body.substr(0, body.find('\n')));
  }
}

void exportFinalMetrics(const AgentSnapshot& final, const std::string& textfile, const std::string& pushUrl) {
  if (textfile.empty() && pushUrl.empty()) return;
  const std::string text = formatMetrics(final);
  if (!textfile.empty()) {
    try {
      writeMetricsTextfile(textfile, text);
      spdlog::info("final metrics written to {}", textfile);
    } catch (const std::exception& e) {
      spdlog::warn("--metrics-textfile: {}", e.what());
    }
  }
  if (!pushUrl.empty()) {
    try {
      pushMetrics(parsePushUrl(pushUrl), final.node, text, std::chrono::milliseconds(3000));
      spdlog::info("final metrics pushed to {}", pushUrl);
    } catch (const std::exception& e) {
      spdlog::warn("--metrics-push {}: {}", pushUrl, e.what());
    }
  }
}

}  // namespace ddprun::status
