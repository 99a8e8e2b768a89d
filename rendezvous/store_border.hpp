#pragma once
// The border between the store and the rendezvous: store errors become rendezvous errors here and
// nowhere else, as in torch's c10d_rendezvous_backend.py (_call_store re-raises store failures as
// RendezvousConnectionError). The store's messages already name the store and the operation.
#include "rendezvous/rendezvous_backend.hpp"
#include "rendezvous/rendezvous_handler.hpp"
#include "store/store_errors.hpp"

namespace ddprun::rendezvous {

/// Runs `call` (store operations) and rethrows StoreCancelled as RendezvousCancelled and any other
/// StoreError as RendezvousBackendError.
template <typename Call>
auto callStore(Call&& call) -> decltype(call()) {
  try {
    return call();
  } catch (const store::StoreCancelled&) {
    throw RendezvousCancelled("rendezvous cancelled: ddprun is stopping");
  } catch (const store::StoreError& e) {
    throw RendezvousBackendError(e.what());
  }
}

}  // namespace ddprun::rendezvous
