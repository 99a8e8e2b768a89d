#pragma once
// A namespace inside another store: every key becomes "<prefix>/<key>", as c10d's PrefixStore.hpp and
// gloo's rendezvous/prefix_store do. Used for one rendezvous run's keys, so nothing above builds key
// strings by hand.
#include <memory>

#include "store/store.hpp"

namespace ddprun::store {

class PrefixStore : public Store {
 public:
  /// Shares `store` (several prefixes, or several users, may sit on one store).
  PrefixStore(std::string prefix, std::shared_ptr<Store> store)
      : prefix_(std::move(prefix)), store_(std::move(store)) {}

  std::string describe() const override { return store_->describe(); }
  void set(const std::string& key, const std::string& value) override { store_->set(join(key), value); }
  std::optional<std::string> get(const std::string& key) override { return store_->get(join(key)); }
  std::string compareSet(const std::string& key, const std::string& expected, const std::string& desired) override {
    return store_->compareSet(join(key), expected, desired);
  }
  int64_t add(const std::string& key, int64_t delta) override { return store_->add(join(key), delta); }
  void erase(const std::string& key) override { store_->erase(join(key)); }
  void multiSet(const std::vector<std::pair<std::string, std::string>>& entries) override {
    std::vector<std::pair<std::string, std::string>> joined;
    joined.reserve(entries.size());
    for (const auto& [key, value] : entries) joined.emplace_back(join(key), value);
    store_->multiSet(joined);
  }
  std::vector<std::string> multiGet(const std::vector<std::string>& keys) override {
    return store_->multiGet(join(keys));
  }
  bool wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    return store_->wait(join(keys), timeout);
  }

  /// The key as the underlying store sees it.
  std::string join(const std::string& key) const { return prefix_ + "/" + key; }
  std::vector<std::string> join(const std::vector<std::string>& keys) const {
    std::vector<std::string> joined;
    joined.reserve(keys.size());
    for (const auto& key : keys) joined.push_back(join(key));
    return joined;
  }

 private:
  std::string prefix_;
  std::shared_ptr<Store> store_;
};

}  // namespace ddprun::store
