#include "rendezvous/session.hpp"

#include <spdlog/spdlog.h>

#include "rendezvous/command_handler.hpp"
#include "rendezvous/request_parser.hpp"
#include "rendezvous/store_server.hpp"

namespace ddprun::rendezvous {
namespace asio = boost::asio;

Session::Session(asio::ip::tcp::socket socket, SessionId id, StoreServer& server)
    : socket_(std::move(socket)), id_(id), server_(server) {
  boost::system::error_code ec;
  auto endpoint = socket_.remote_endpoint(ec);
  peer_ = ec ? "unknown peer" : endpoint.address().to_string() + ":" + std::to_string(endpoint.port());
  socket_.set_option(asio::ip::tcp::no_delay(true), ec);  // replies are tiny and latency-bound
}

void Session::start() { read(); }

void Session::read() {
  socket_.async_read_some(asio::buffer(chunk_), [self = shared_from_this()](boost::system::error_code ec, size_t n) {
    if (self->closed_) return;
    if (ec) {
      self->close(ec == asio::error::eof || ec == asio::error::connection_reset ? "" : "read failed: " + ec.message());
      return;
    }
    self->input_.append(self->chunk_, n);
    self->processInput();
    if (!self->closed_) self->read();
  });
}

void Session::processInput() {
  const Limits& limits = server_.options().limits;
  size_t offset = 0;
  while (!closed_ && offset < input_.size()) {
    std::string_view pending(input_.data() + offset, input_.size() - offset);
    if (!dialect_) {
      dialect_ = detectDialect(pending);
      if (!dialect_) break;
    }
    ParseResult parsed = parseRequest(pending, *dialect_, limits);
    if (parsed.status == ParseResult::Status::kNeedMore) break;
    if (parsed.status == ParseResult::Status::kBad) {
      close("malformed request: " + parsed.error);
      return;
    }
    offset += parsed.consumed;
    const Request& request = parsed.request;
    if (*dialect_ == Dialect::kTorch2 && !validated_) {
      if (request.command != Command::kValidate || request.word != kValidateMagic) {
        close("the first request of a torch 2.x connection must be VALIDATE with the magic 0x3C85F7CE");
        return;
      }
      validated_ = true;
      continue;
    }
    HandlerOutcome outcome = handleRequest(server_.state(), id_, request);
    if (!outcome.error.empty()) {
      close(outcome.error);
      return;
    }
    if (outcome.reply) deliver(std::move(*outcome.reply));
    if (!outcome.woken.empty()) server_.wake(outcome.woken);
  }
  input_.erase(0, offset);
}

void Session::deliver(std::string bytes) {
  if (closed_) return;
  outboxBytes_ += bytes.size();
  if (outboxBytes_ > server_.options().maxPendingReplyBytes) {
    close("client is not reading its replies (" + std::to_string(outboxBytes_) + " bytes pending)");
    return;
  }
  outbox_.push_back(std::move(bytes));
  if (!writing_) write();
}

void Session::write() {
  writing_ = true;
  asio::async_write(socket_, asio::buffer(outbox_.front()),
                    [self = shared_from_this()](boost::system::error_code ec, size_t) {
                      if (self->closed_) return;
                      if (ec) {
                        self->close("write failed: " + ec.message());
                        return;
                      }
                      self->outboxBytes_ -= self->outbox_.front().size();
                      self->outbox_.pop_front();
                      if (self->outbox_.empty()) {
                        self->writing_ = false;
                      } else {
                        self->write();
                      }
                    });
}

void Session::close(const std::string& reason) {
  if (closed_) return;
  closed_ = true;
  if (!reason.empty()) spdlog::warn("store: closing connection from {}: {}", peer_, reason);
  boost::system::error_code ec;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ec);
  socket_.close(ec);
  server_.state().cancelWait(id_);
  server_.sessionClosed(id_);
}

}  // namespace ddprun::rendezvous
