#include "store/store_context.hpp"

namespace ddprun::store {

StoreContext::StoreContext(const StoreLimits& limits) : limits_(limits), readBuffer_(new char[kReadBufferBytes]) {}

uint64_t StoreContext::account(int64_t delta) {
  buffered_ = static_cast<uint64_t>(static_cast<int64_t>(buffered_) + delta);
  return buffered_;
}

}  // namespace ddprun::store
