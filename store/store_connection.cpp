#include "store/store_connection.hpp"

#include <linux/sockios.h>
#include <spdlog/spdlog.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "store/command_handler.hpp"
#include "store/connection_manager.hpp"
#include "store/store_context.hpp"

namespace ddprun::store {
namespace asio = boost::asio;

StoreConnection::StoreConnection(asio::ip::tcp::socket socket, ConnectionId id, StoreContext& context,
                                 ConnectionManager& manager, std::string peer, asio::ip::tcp::endpoint peerEndpoint)
    : socket_(std::move(socket)),
      id_(id),
      context_(context),
      manager_(manager),
      peer_(std::move(peer)),
      peerEndpoint_(std::move(peerEndpoint)) {
  boost::system::error_code ec;
  if (peerEndpoint_.port() == 0) peerEndpoint_ = socket_.remote_endpoint(ec);
  if (peer_.empty()) {
    peer_ = ec ? "unknown peer" : peerEndpoint_.address().to_string() + ":" + std::to_string(peerEndpoint_.port());
  }
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
  const size_t room = std::min<uint64_t>(context_.readBufferSize(), std::max<uint64_t>(context_.limits().turnBytes, 1));
  boost::system::error_code ec;
  const size_t n = socket_.read_some(asio::buffer(context_.readBuffer(), room), ec);
  if (ec == asio::error::would_block || ec == asio::error::try_again) {
    waitReadable();
    return;
  }
  if (ec) {
    close(ec == asio::error::eof || ec == asio::error::connection_reset ? "" : "read failed: " + ec.message());
    return;
  }
  // Requests followed by a close (or a reset): the client is gone before any reply could reach it. Asking
  // costs one recv(MSG_PEEK) per read; it saves building replies nobody reads (100 GETs of 60 MiB that close
  // at once cost the client nothing and the store seconds).
  if (!peerGone_ && n < room) peerGone_ = peerGone();
  process(std::string_view(context_.readBuffer(), n));
}

bool StoreConnection::peerGone() {
  char byte;
  const ssize_t n = ::recv(socket_.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;                                                    // end of stream after what was read
  return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;  // reset
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
  parser_.emplace(*dialect, context_.limits());
  parser_->setValueRoom([this](const std::string& key) {
    const std::string* old = key.empty() ? nullptr : context_.state().find(key);
    return budgetRoom() + (old ? old->size() : 0);
  });
  std::string first = std::move(prologue_);  // the prologue is the start of the first request
  prologue_.clear();
  first.append(input.substr(pos));
  serve(first);
}

void StoreConnection::serve(std::string_view input) {
  const uint64_t share = context_.limits().turnBytes;
  uint64_t work = 0;
  size_t pos = 0;
  while (pos < input.size() && work < share && !closed_) {
    const size_t before = pos;
    const auto status = parser_->feed(input.substr(pos), pos);
    work += pos - before;
    if (status == RequestParser::Status::kBad) {
      // Over a limit: refused; otherwise bytes that are no request at all.
      close((parser_->limitName() != nullptr ? "refused: " : "malformed request: ") + parser_->error(),
            parser_->limitName());
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
    if (peerGone_) {
      spdlog::debug("store: {} closed its connection; its requests are applied, no replies sent", peer_);
      close("");
      return;
    }
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

uint64_t StoreConnection::budgetRoom() const {
  // The context's count holds this connection's share as of its last account(); count its buffers as they are
  // now instead, so a request's own bytes, about to move into the store, are not counted twice.
  const uint64_t others = context_.usedBytes() - std::min(context_.usedBytes(), accounted_);
  const uint64_t used = others + buffered();
  const uint64_t budget = context_.limits().memoryBudgetBytes;
  return budget > used ? budget - used : 0;
}

RequestBudget StoreConnection::requestBudget() const {
  const StoreLimits& limits = context_.limits();
  RequestBudget budget;
  budget.reply = ReplyAllowance{limits.maxReplyBytes, "max-reply-bytes"};
  auto room = [](uint64_t cap, uint64_t used) { return cap > used ? cap - used : 0; };
  if (const uint64_t pending = room(limits.maxPendingReplyBytes, outboxBytes_); pending < budget.reply.bytes) {
    budget.reply = ReplyAllowance{pending, "max-pending-reply-bytes"};
  }
  const uint64_t left = budgetRoom();
  if (left < budget.reply.bytes) budget.reply = ReplyAllowance{left, "memory-budget-bytes"};
  budget.storeRoom = left;
  budget.maxKeys = limits.maxKeys;
  budget.maxValueBytes = limits.maxValueBytes;
  budget.maxQueueLength = limits.maxQueueLength;
  return budget;
}

uint64_t StoreConnection::handle(Request request) {
  KvState& state = context_.state();
  if (parser_->dialect() == Dialect::kTorch113 && state.isWaiting(id_)) {
    // A 1.13 client never pipelines, and when its WAIT times out it gives up without a word (no
    // CANCEL_WAIT in 1.13). A new request while its WAIT is unanswered therefore means that WAIT was
    // abandoned: drop it, so its wake-up byte is never sent and misread as the reply to this request.
    state.cancelWait(id_);
    spdlog::debug("store: {} abandoned its WAIT (torch 1.13 client timeout); registration dropped", peer_);
  }
  context_.countRequest();
  if (peerGone_ && onlyReads(request.command)) return 0;  // its only effect would be a reply nobody reads
  // Refused before the owner hears of it: another user's ADD to a node's heartbeat key must not make its
  // connection speak for that node (rendezvous/node_connections.hpp).
  if (const std::string refusal = writeRefusal(request); !refusal.empty()) {
    close(refusal);
    return 0;
  }
  context_.noteRequest(id_);
  if (request.command == Command::kAdd) context_.noteAdded(id_, request.keys[0]);
  // The owner's callbacks may change keys, and a wake-up they send may close this connection (its unread replies
  // over a limit): nothing more is served on it then.
  if (closed_) return 0;
  HandlerOutcome outcome = handleRequest(state, id_, std::move(request), requestBudget());
  if (!outcome.error.empty()) {
    close(outcome.error, outcome.limit);
    return 0;
  }
  uint64_t replyBytes = 0;
  if (outcome.reply && !peerGone_) {
    replyBytes = outcome.reply->size();
    deliver(std::move(*outcome.reply));
  }
  if (!outcome.woken.empty()) manager_.wake(outcome.woken);
  return replyBytes;
}

std::string StoreConnection::writeRefusal(const Request& request) {
  if (!context_.ownUserWritesOnly() || onlyReads(request.command) || request.keys.empty()) return "";
  if (!untrustedWriter_) {
    // Asked once, at the first write: a torch client's is usually the ADD of its init key, whose reply it waits for,
    // so its socket is open and owned then. A client that only reads costs no question.
    boost::system::error_code ec;
    const auto local = socket_.local_endpoint(ec);
    untrustedWriter_ = ec || peerEndpoint_.port() == 0 ? "whose address is unknown"
                                                       : context_.clientOwners().untrustedWriter(peerEndpoint_, local);
  }
  if (untrustedWriter_->empty()) return "";
  return "refused: a client " + *untrustedWriter_ + " wrote '" + escapeForLog(request.keys[0], 64) + "'; only uid " +
         std::to_string(::geteuid()) + " (ddprun's user) and root may write to this store from its host";
}

void StoreConnection::sendStopWaiting() {
  Reply stop;
  deliver(std::move(stop.u8(kStopWaiting)));
}

uint64_t StoreConnection::buffered() const {
  return prologue_.size() + leftover_.size() + outboxBytes_ + (parser_ ? parser_->bufferedBytes() : 0);
}

bool StoreConnection::account() {
  if (closed_) return false;
  const uint64_t now = buffered();
  const int64_t delta = static_cast<int64_t>(now) - static_cast<int64_t>(accounted_);
  context_.account(delta);
  accounted_ = now;
  const uint64_t total = context_.usedBytes();
  if (delta > 0 && total > context_.limits().memoryBudgetBytes) {
    close("buffering " + std::to_string(now) + " bytes would take the store to " + std::to_string(total) +
              " bytes (stored data and buffers), over its budget of " +
              std::to_string(context_.limits().memoryBudgetBytes),
          "memory-budget-bytes");
    return false;
  }
  return true;
}

void StoreConnection::deliver(Reply reply) {
  if (closed_) return;
  const uint64_t cap = context_.limits().maxPendingReplyBytes;
  if (outboxBytes_ + reply.size() > cap) {
    close("client is not reading its replies (" + std::to_string(outboxBytes_ + reply.size()) +
              " bytes pending, limit " + std::to_string(cap) + ")",
          "max-pending-reply-bytes");
    return;
  }
  if (outbox_.empty()) lastWriteProgress_ = std::chrono::steady_clock::now();
  context_.countReplyBytes(reply.size());
  outboxBytes_ += reply.size();
  for (auto& piece : reply.takePieces()) outbox_.push_back(std::move(piece));
  if (!account()) return;
  if (!writing_) write();
}

std::optional<std::chrono::steady_clock::time_point> StoreConnection::unreadSince() {
  if (outbox_.empty()) return std::nullopt;
  int queued = 0;
  if (::ioctl(socket_.native_handle(), SIOCOUTQ, &queued) == 0 && queued != lastKernelQueue_) {
    if (lastKernelQueue_ >= 0) lastWriteProgress_ = std::chrono::steady_clock::now();
    lastKernelQueue_ = queued;
  }
  return lastWriteProgress_;
}

void StoreConnection::write() {
  // One slice per write: at most turn-bytes from the oldest pieces, so a 60 MiB reply is sent a slice per turn
  // of the loop, between the other clients' requests.
  constexpr size_t kMaxBuffers = 16;
  const uint64_t slice = std::max<uint64_t>(context_.limits().turnBytes, 1);
  std::vector<asio::const_buffer> buffers;
  uint64_t gathered = 0;
  size_t offset = frontSent_;
  for (const auto& piece : outbox_) {
    if (buffers.size() == kMaxBuffers || gathered >= slice) break;
    const std::string_view bytes = piece.view().substr(offset);
    offset = 0;
    const size_t take = static_cast<size_t>(std::min<uint64_t>(bytes.size(), slice - gathered));
    buffers.emplace_back(bytes.data(), take);
    gathered += take;
  }
  writing_ = true;
  socket_.async_write_some(buffers, [self = shared_from_this()](boost::system::error_code ec, size_t written) {
    if (self->closed_) return;
    if (ec == asio::error::would_block || ec == asio::error::try_again)
      written = 0;
    else if (ec) {
      self->close("write failed: " + ec.message());
      return;
    }
    self->consumeWritten(written);
    self->account();
    if (self->closed_) return;
    if (self->outbox_.empty()) {
      self->writing_ = false;
    } else {
      self->write();
    }
  });
}

void StoreConnection::consumeWritten(size_t written) {
  if (written > 0) lastWriteProgress_ = std::chrono::steady_clock::now();
  outboxBytes_ -= written;
  while (written > 0) {
    const size_t left = outbox_.front().view().size() - frontSent_;
    if (written < left) {
      frontSent_ += written;
      return;
    }
    written -= left;
    outbox_.pop_front();
    frontSent_ = 0;
  }
}

void StoreConnection::close(const std::string& reason, const char* limit) {
  if (closed_) return;
  closed_ = true;
  if (limit != nullptr) {
    context_.warnings().warn(
        limit, "store: limit " + std::string(limit) + " hit by " + peer_ + ": " + reason + "; closing its connection");
  } else if (!reason.empty()) {
    context_.warnings().warn("connection", "store: closing connection from " + peer_ + ": " + reason);
  }
  boost::system::error_code ec;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ec);
  socket_.close(ec);
  context_.state().cancelWait(id_);
  outbox_.clear();
  frontSent_ = 0;
  outboxBytes_ = 0;
  leftover_.clear();
  prologue_.clear();
  parser_.reset();
  requestSince_.reset();
  context_.account(-static_cast<int64_t>(accounted_));
  accounted_ = 0;
  context_.noteClosed(id_);
  manager_.remove(id_);
}

}  // namespace ddprun::store
