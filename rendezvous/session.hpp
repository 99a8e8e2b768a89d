#pragma once
// One client connection of the store: reads a byte stream, decides the dialect from its first bytes,
// parses requests incrementally, applies them, and writes replies through a queue that starts a write
// only when none is in flight (after Asio's chat-server example).
#include <boost/asio.hpp>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "rendezvous/kv_state.hpp"
#include "rendezvous/wire_protocol.hpp"

namespace ddprun::rendezvous {

class StoreServer;

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(boost::asio::ip::tcp::socket socket, SessionId id, StoreServer& server);

  void start();
  /// Queues `bytes` for sending.
  void deliver(std::string bytes);
  /// Closes the connection and drops its wait registrations; logs `reason` when non-empty.
  void close(const std::string& reason);
  SessionId id() const { return id_; }

 private:
  void read();
  void processInput();
  void write();

  boost::asio::ip::tcp::socket socket_;
  SessionId id_;
  StoreServer& server_;
  std::string peer_;
  std::string input_;
  std::optional<Dialect> dialect_;
  bool validated_ = false;
  std::deque<std::string> outbox_;
  uint64_t outboxBytes_ = 0;
  bool writing_ = false;
  bool closed_ = false;
  char chunk_[64 * 1024];
};

}  // namespace ddprun::rendezvous
