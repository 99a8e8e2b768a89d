#include "store/store_connection.hpp"

#include <spdlog/spdlog.h>

#include "store/command_handler.hpp"
#include "store/connection_manager.hpp"

namespace ddprun::store {
namespace asio = boost::asio;

StoreConnection::StoreConnection(asio::ip::tcp::socket socket, ConnectionId id, ConnectionManager& manager)
    : socket_(std::move(socket)), id_(id), manager_(manager) {
  boost::system::error_code ec;
  auto endpoint = socket_.remote_endpoint(ec);
  peer_ = ec ? "unknown peer" : endpoint.address().to_string() + ":" + std::to_string(endpoint.port());
  socket_.set_option(asio::ip::tcp::no_delay(true), ec);  // replies are tiny and latency-bound
  socket_.non_blocking(true, ec);
}

void StoreConnection::start() { waitReadable(); }

void StoreConnection::waitReadable() {
  socket_.async_wait(asio::ip::tcp::socket::wait_read, [self = shared_from_this()](boost::system::error_code ec) {
    if (self->closed_) return;
    if (ec) {
      self->close("wait failed: " + ec.message());
      return;
    }
    self->readAvailable();
  });
}

void StoreConnection::readAvailable() {
  const size_t room = std::min<uint64_t>(manager_.readBufferSize(), std::max<uint64_t>(manager_.limits().turnBytes, 1));
  boost::system::error_code ec;
  const size_t n = socket_.read_some(asio::buffer(manager_.readBuffer(), room), ec);
  if (ec == asio::error::would_block || ec == asio::error::try_again) {
    waitReadable();
    return;
  }
  if (ec) {
    close(ec == asio::error::eof || ec == asio::error::connection_reset ? "" : "read failed: " + ec.message());
    return;
  }
  process(std::string_view(manager_.readBuffer(), n));
}

void StoreConnection::process(std::string_view input) {
  if (parser_) {
    serve(input);
    return;
  }
  size_t pos = 0;
  std::optional<Dialect> dialect;
  while (!dialect && pos < input.size()) {
    prologue_.push_back(input[pos++]);
    dialect = detectDialect(prologue_);
  }
  if (!dialect) {
    if (!requestSince_) requestSince_ = std::chrono::steady_clock::now();
    if (account()) waitReadable();
    return;
  }
  parser_.emplace(*dialect, manager_.limits());
  std::string first = std::move(prologue_);  // the prologue is the start of the first request
  prologue_.clear();
  first.append(input.substr(pos));
  serve(first);
}

void StoreConnection::serve(std::string_view input) {
  const uint64_t share = manager_.limits().turnBytes;
  uint64_t work = 0;
  size_t pos = 0;
  while (pos < input.size() && work < share && !closed_) {
    const size_t before = pos;
    const auto status = parser_->feed(input.substr(pos), pos);
    work += pos - before;
    if (status == RequestParser::Status::kBad) {
      close("malformed request: " + parser_->error(), parser_->limitName());
      return;
    }
    if (status == RequestParser::Status::kNeedMore) {
      if (!requestSince_) requestSince_ = std::chrono::steady_clock::now();
      break;
    }
    requestSince_.reset();
    work += handle(parser_->takeRequest());
  }
  if (closed_) return;
  std::string rest(input.substr(pos));  // `input` may be leftover_ itself
  leftover_ = std::move(rest);
  if (!account()) return;
  if (leftover_.empty()) {
    waitReadable();
    return;
  }
  // This connection's turn is over: the others are served before the rest of its input.
  asio::post(socket_.get_executor(), [self = shared_from_this()] {
    if (self->closed_) return;
    std::string pending = std::move(self->leftover_);
    self->leftover_.clear();
    self->serve(pending);
  });
}

ReplyAllowance StoreConnection::replyAllowance() const {
  const StoreLimits& limits = manager_.limits();
  ReplyAllowance allowance{limits.maxReplyBytes, "max-reply-bytes"};
  auto room = [](uint64_t cap, uint64_t used) { return cap > used ? cap - used : 0; };
  if (const uint64_t pending = room(limits.maxPendingReplyBytes, outboxBytes_); pending < allowance.bytes) {
    allowance = ReplyAllowance{pending, "max-pending-reply-bytes"};
  }
  if (const uint64_t budget = room(limits.memoryBudgetBytes, manager_.bufferedBytes()); budget < allowance.bytes) {
    allowance = ReplyAllowance{budget, "memory-budget-bytes"};
  }
  return allowance;
}

uint64_t StoreConnection::handle(const Request& request) {
  KvState& state = manager_.state();
  if (parser_->dialect() == Dialect::kTorch113 && state.isWaiting(id_)) {
    // A 1.13 client never pipelines, and when its WAIT times out it gives up without a word (no
    // CANCEL_WAIT in 1.13). A new request while its WAIT is unanswered therefore means that WAIT was
    // abandoned: drop it, so its wake-up byte is never sent and misread as the reply to this request.
    state.cancelWait(id_);
    spdlog::debug("store: {} abandoned its WAIT (torch 1.13 client timeout); registration dropped", peer_);
  }
  manager_.countRequest();
  HandlerOutcome outcome = handleRequest(state, id_, request, replyAllowance());
  if (!outcome.error.empty()) {
    close(outcome.error, outcome.limit);
    return 0;
  }
  uint64_t replyBytes = 0;
  if (outcome.reply) {
    replyBytes = outcome.reply->size();
    deliver(std::move(*outcome.reply));
  }
  if (!outcome.woken.empty()) manager_.wake(outcome.woken);
  return replyBytes;
}

uint64_t StoreConnection::buffered() const {
  return prologue_.size() + leftover_.size() + outboxBytes_ + (parser_ ? parser_->bufferedBytes() : 0);
}

bool StoreConnection::account() {
  if (closed_) return false;
  const uint64_t now = buffered();
  const int64_t delta = static_cast<int64_t>(now) - static_cast<int64_t>(accounted_);
  const uint64_t total = manager_.account(delta);
  accounted_ = now;
  if (delta > 0 && total > manager_.limits().memoryBudgetBytes) {
    close("buffering " + std::to_string(now) + " bytes would take the store to " + std::to_string(total) +
              " bytes, over its budget of " + std::to_string(manager_.limits().memoryBudgetBytes),
          "memory-budget-bytes");
    return false;
  }
  return true;
}

void StoreConnection::deliver(std::string bytes) {
  if (closed_) return;
  const uint64_t cap = manager_.limits().maxPendingReplyBytes;
  if (outboxBytes_ + bytes.size() > cap) {
    close("client is not reading its replies (" + std::to_string(outboxBytes_ + bytes.size()) +
              " bytes pending, limit " + std::to_string(cap) + ")",
          "max-pending-reply-bytes");
    return;
  }
  outboxBytes_ += bytes.size();
  outbox_.push_back(std::move(bytes));
  if (!account()) return;
  if (!writing_) write();
}

void StoreConnection::write() {
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
                      self->account();
                      if (self->closed_) return;
                      if (self->outbox_.empty()) {
                        self->writing_ = false;
                      } else {
                        self->write();
                      }
                    });
}

void StoreConnection::close(const std::string& reason, const char* limit) {
  if (closed_) return;
  closed_ = true;
  if (limit != nullptr) {
    manager_.warnings().warn(limit, "store: limit " + std::string(limit) + " hit by " + peer_ + ": " + reason +
                                        "; closing its connection");
  } else if (!reason.empty()) {
    manager_.warnings().warn("connection", "store: closing connection from " + peer_ + ": " + reason);
  }
  boost::system::error_code ec;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ec);
  socket_.close(ec);
  manager_.state().cancelWait(id_);
  outbox_.clear();
  outboxBytes_ = 0;
  leftover_.clear();
  prologue_.clear();
  parser_.reset();
  requestSince_.reset();
  manager_.account(-static_cast<int64_t>(accounted_));
  accounted_ = 0;
  manager_.remove(id_);
}

}  // namespace ddprun::store
