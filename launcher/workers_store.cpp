#include "launcher/workers_store.hpp"

#include "common/error.hpp"
#include "store/store_client.hpp"

namespace ddprun::launcher {
namespace {

class Served : public WorkersStore {
 public:
  explicit Served(store::StoreServer& server) : server_(server) {}
  std::optional<std::string> get(const std::string& key) override { return server_.get(key); }
  void set(const std::string& key, const std::string& value) override { server_.set(key, value); }
  std::string compareSet(const std::string& key, const std::string& expected, const std::string& desired) override {
    return server_.compareSet(key, expected, desired);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    const std::optional<int64_t> sum = server_.add(key, delta);
    if (!sum) throw Error("the workers' store holds no integer under " + key);
    return *sum;
  }
  void erase(const std::string& key) override { server_.erase(key); }

 private:
  store::StoreServer& server_;
};

class Remote : public WorkersStore {
 public:
  Remote(const std::string& host, int port, std::chrono::milliseconds timeout)
      : client_(host, static_cast<uint16_t>(port), timeout, timeout) {}
  std::optional<std::string> get(const std::string& key) override { return client_.get(key); }
  void set(const std::string& key, const std::string& value) override { client_.set(key, value); }
  std::string compareSet(const std::string& key, const std::string& expected, const std::string& desired) override {
    return client_.compareSet(key, expected, desired);
  }
  int64_t add(const std::string& key, int64_t delta) override { return client_.add(key, delta); }
  void erase(const std::string& key) override { client_.erase(key); }

 private:
  store::StoreClient client_;
};

}  // namespace

std::unique_ptr<WorkersStore> servedWorkersStore(store::StoreServer& server) {
  return std::make_unique<Served>(server);
}

std::unique_ptr<WorkersStore> remoteWorkersStore(const std::string& host, int port, std::chrono::milliseconds timeout) {
  return std::make_unique<Remote>(host, port, timeout);
}

}  // namespace ddprun::launcher
