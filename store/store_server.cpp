#include "store/store_server.hpp"

#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <algorithm>

#include "store/store_connection.hpp"

namespace ddprun::store {
namespace asio = boost::asio;
using asio::ip::tcp;

uint64_t raiseOpenFileLimit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  return static_cast<uint64_t>(limit.rlim_cur);
}

StoreServer::StoreServer(asio::io_context& io, const StoreServerOptions& options)
    : options_(options), context_(options.limits), connections_(io, options.limits) {
  context_.setOwnUserWritesOnly(options.ownUserWritesOnly);
  raiseOpenFileLimit();
  const std::string where = options.host + ":" + std::to_string(options.port);
  boost::system::error_code ec;
  auto address = asio::ip::make_address(options.host, ec);
  if (ec) throw StoreBindError("store: cannot bind " + where + ": not an IP address (" + ec.message() + ")");
  try {
    listener_ = std::make_unique<TcpListener>(
        io, tcp::endpoint(address, options.port), TcpListener::Options{"store"},
        [this](tcp::socket socket, const tcp::endpoint& peer) { admit(std::move(socket), peer); },
        [this] { return std::to_string(connections_.connectionCount()) + " open"; });
  } catch (const ListenError& e) {
    throw StoreBindError(e.what());
  }
}

StoreServer::~StoreServer() { stop(); }

void StoreServer::admit(tcp::socket socket, const tcp::endpoint& peer) {
  const std::string name = peer.address().to_string() + ":" + std::to_string(peer.port());
  connections_.start(
      std::make_shared<StoreConnection>(std::move(socket), connections_.nextId(), context_, connections_, name, peer));
}

void StoreServer::set(const std::string& key, std::string value) {
  KvState::Woken woken;
  context_.state().set(key, std::move(value), woken);
  connections_.wake(woken);
}

std::optional<std::string> StoreServer::get(const std::string& key) const { return context_.state().get(key); }

std::string StoreServer::compareSet(const std::string& key, const std::string& expected, std::string desired) {
  KvState::Woken woken;
  const auto now = context_.state().compareSet(key, expected, std::move(desired), woken);
  connections_.wake(woken);
  return *now;
}

std::optional<int64_t> StoreServer::add(const std::string& key, int64_t delta) {
  KvState::Woken woken;
  const std::optional<int64_t> sum = context_.state().add(key, delta, woken);
  connections_.wake(woken);
  return sum;
}

void StoreServer::erase(const std::string& key) { context_.state().deleteKey(key); }

size_t StoreServer::deleteRootKeys(const std::vector<std::string>& rootKeys) {
  size_t deleted = 0;
  for (const auto& key : context_.state().listKeys()) {
    const bool named = std::find(rootKeys.begin(), rootKeys.end(), key) != rootKeys.end();
    if (!named && !key.empty() && key.front() == '/') continue;
    deleted += context_.state().deleteKey(key) ? 1 : 0;
  }
  return deleted;
}

void StoreServer::stop() {
  if (stopped_) return;
  stopped_ = true;
  listener_->stop();
  context_.stopEvents();
  connections_.stopAll();
}

}  // namespace ddprun::store
