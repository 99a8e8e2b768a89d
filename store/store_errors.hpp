#pragma once
// The store's own errors. Layers above (the rendezvous backends) catch them at their border and rethrow
// their own, as torch's c10d_rendezvous_backend.py does in _call_store; the store never learns that a
// rendezvous exists.
#include "common/error.hpp"

namespace ddprun::store {

/// Base of every store failure; the message names the store ("c10d store at host:port") and the operation.
class StoreError : public Error {
 public:
  using Error::Error;
};

/// An operation's reply did not arrive within its timeout.
class StoreTimeout : public StoreError {
 public:
  using StoreError::StoreError;
};

/// The store cannot be reached, closed the connection, or answered something that is not TCPStore.
class StoreConnectionError : public StoreError {
 public:
  using StoreError::StoreError;
};

/// The caller asked to stop (its cancel flag) while an operation was retrying.
class StoreCancelled : public StoreError {
 public:
  using StoreError::StoreError;
};

/// The server cannot bind or listen (address in use, not an address of this machine), naming the address.
class StoreBindError : public StoreError {
 public:
  using StoreError::StoreError;
};

}  // namespace ddprun::store
