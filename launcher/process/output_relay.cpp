#include "launcher/process/output_relay.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/error.hpp"
#include "launcher/process/terminal.hpp"

namespace ddprun::launcher {
namespace asio = boost::asio;

namespace {
/// How often a paused relay looks whether the console has room again.
constexpr std::chrono::milliseconds kRoomPoll{10};
}  // namespace

OutputRelay::OutputRelay(asio::io_context& io, int readFd, bool isTerminal, ConsoleWriter* console,
                         ConsoleWriter::Source source, std::string prefix, const std::string& logFile)
    : stream_(io, readFd),
      isTerminal_(isTerminal),
      partialTimer_(io),
      console_(console),
      source_(source),
      segmenter_(std::move(prefix)),
      fileName_(logFile),
      roomTimer_(io) {
  if (!logFile.empty()) {
    // Read and write: with --tee a console that falls behind catches up from the file.
    file_ = ::open(logFile.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (file_ < 0) throw Error("cannot create worker log file " + logFile + ": " + std::strerror(errno));
  }
}

OutputRelay::~OutputRelay() {
  for (int fd : {file_, copy_, filtered_}) {
    if (fd >= 0) ::close(fd);
  }
}

void OutputRelay::duplicateLines(std::vector<std::string> filters, const std::string& file) {
  if (filters.empty()) return;
  filtered_ = ::open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (filtered_ < 0) throw Error("cannot create " + file + ": " + std::strerror(errno));
  filters_ = std::move(filters);
}

void OutputRelay::duplicate(std::string_view data) {
  for (char c : data) {
    if (c != '\n' && filterLine_.size() < OutputSegmenter::kDefaultMaxLineBytes) {
      filterLine_ += c;
      continue;
    }
    for (const auto& filter : filters_) {
      if (filterLine_.find(filter) == std::string::npos) continue;
      // One write per line: O_APPEND keeps the ranks' lines whole in the shared file.
      const std::string line = segmenter_.prefix() + filterLine_ + "\n";
      if (!toFile(filtered_, line.data(), line.size())) filters_.clear();
      break;
    }
    filterLine_.clear();
    if (c != '\n') filterLine_ += c;
  }
}

void OutputRelay::copyTo(int fd) {
  if (copy_ >= 0) ::close(copy_);
  copy_ = fd;
}

void OutputRelay::start() { readMore(); }

void OutputRelay::cancel() {
  boost::system::error_code ec;
  stream_.close(ec);
  partialTimer_.cancel();
  roomTimer_.cancel();
  consoleBehind_ = false;
  if (paused_) heldSeconds_ = heldSeconds();
  paused_ = false;
}

size_t OutputRelay::unreadBytes() const {
  int available = 0;
  if (!stream_.is_open() ||
      ::ioctl(const_cast<OutputRelay*>(this)->stream_.native_handle(), FIONREAD, &available) != 0) {
    return 0;
  }
  return available > 0 ? static_cast<size_t>(available) : 0;
}

void OutputRelay::copyWindowSizeFrom(int terminal) {
  if (isTerminal_ && stream_.is_open()) {
    copyWindowSize(terminal, stream_.native_handle(), static_cast<int>(visibleWidth(segmenter_.prefix())));
  }
}

double OutputRelay::heldSeconds() const {
  const double current =
      paused_ ? std::chrono::duration<double>(std::chrono::steady_clock::now() - pausedAt_).count() : 0;
  return heldSeconds_ + current;
}

void OutputRelay::readMore() {
  stream_.async_read_some(asio::buffer(buffer_),
                          [self = shared_from_this()](const boost::system::error_code& ec, size_t n) {
                            if (n > 0) self->onData(n);
                            if (ec == asio::error::operation_aborted) return;
                            // EOF on a pipe; EIO on a pseudo-terminal master once every holder of the slave has closed
                            // it.
                            if (ec) {
                              self->onEnd();
                              return;
                            }
                            if (!self->paused_) self->readMore();
                          });
}

void OutputRelay::onData(size_t n) {
  lastOutput_ = std::chrono::steady_clock::now();
  if (!sawAddressInUse_) {
    constexpr std::string_view kPhrase = "Address already in use";
    const std::string text = scanTail_ + std::string(buffer_.data(), n);
    sawAddressInUse_ = text.find(kPhrase) != std::string::npos;
    scanTail_ = text.substr(text.size() > kPhrase.size() ? text.size() - kPhrase.size() : 0);
  }
  if (keepTail_) tail_.feed(std::string_view(buffer_.data(), n));
  if (file_ >= 0 && !fileFailed_) {
    fileFailed_ = !toFile(file_, buffer_.data(), n);
    if (!fileFailed_) fileBytes_ += n;
  }
  if (copy_ >= 0 && !toFile(copy_, buffer_.data(), n)) {
    ::close(copy_);
    copy_ = -1;
  }
  if (!filters_.empty()) duplicate(std::string_view(buffer_.data(), n));
  if (console_ == nullptr) return;
  if (file_ >= 0 && !fileFailed_) {
    // --tee: the file has the bytes; the console gets them now, or later from the file.
    if (consoleBehind_) return;
    const bool room = show(std::string_view(buffer_.data(), n));
    shownBytes_ = fileBytes_;
    if (!room) {
      consoleBehind_ = true;
      waitForRoom();
    }
    return;
  }
  if (!show(std::string_view(buffer_.data(), n))) {
    // The console is full: stop reading (the worker waits in write) until it has room again.
    paused_ = true;
    pausedAt_ = std::chrono::steady_clock::now();
    waitForRoom();
  }
}

bool OutputRelay::show(std::string_view bytes) {
  const bool room = toConsole(segmenter_.feed(bytes));
  if (promptWaits()) armPartialFlush();
  return room;
}

void OutputRelay::waitForRoom() {
  if (waitingForRoom_) return;
  waitingForRoom_ = true;
  roomTimer_.expires_after(kRoomPoll);
  roomTimer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    self->waitingForRoom_ = false;
    if (ec) return;
    if (!self->console_->hasRoom()) {
      self->waitForRoom();
      return;
    }
    if (self->consoleBehind_) self->catchUp();
    if (self->paused_) {
      self->heldSeconds_ = self->heldSeconds();
      self->paused_ = false;
      if (self->stream_.is_open()) self->readMore();
    }
  });
}

void OutputRelay::catchUp() {
  std::array<char, 64 * 1024> chunk{};
  while (consoleBehind_) {
    const uint64_t left = fileBytes_ - shownBytes_;
    if (left == 0) {
      consoleBehind_ = false;
      break;
    }
    const ssize_t n =
        ::pread(file_, chunk.data(), std::min<uint64_t>(left, chunk.size()), static_cast<off_t>(shownBytes_));
    if (n <= 0) {  // the file shrank under us (someone truncated it): what it lost cannot be shown
      consoleBehind_ = false;
      break;
    }
    shownBytes_ += static_cast<uint64_t>(n);
    if (!show(std::string_view(chunk.data(), static_cast<size_t>(n)))) {
      waitForRoom();
      return;
    }
  }
  if (!stream_.is_open()) onEnd();  // the stream ended while the console was behind
}

void OutputRelay::onEnd() {
  boost::system::error_code ec;
  stream_.close(ec);
  if (consoleBehind_) return;  // catchUp() finishes
  partialTimer_.cancel();
  if (console_ != nullptr) toConsole(segmenter_.finish());
  for (int* fd : {&file_, &copy_}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

std::string OutputRelay::takeUnshown() {
  std::string raw;
  if (consoleBehind_ && file_ >= 0) {
    std::array<char, 64 * 1024> chunk{};
    for (ssize_t n; (n = ::pread(file_, chunk.data(), chunk.size(), static_cast<off_t>(shownBytes_))) > 0;) {
      raw.append(chunk.data(), static_cast<size_t>(n));
      shownBytes_ += static_cast<uint64_t>(n);
    }
  }
  if (stream_.is_open() && console_ != nullptr && file_ < 0) {
    // What the worker wrote that the relay has not read yet (it paused): read it without waiting.
    const int fd = stream_.native_handle();
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    std::array<char, 64 * 1024> chunk{};
    for (ssize_t n; raw.size() < (64u << 20) && (n = ::read(fd, chunk.data(), chunk.size())) > 0;) {
      raw.append(chunk.data(), static_cast<size_t>(n));
    }
  }
  OutputSegmenter::Piece piece = segmenter_.feed(raw);
  const OutputSegmenter::Piece rest = segmenter_.finish();
  piece.text += rest.text;
  consoleBehind_ = false;
  cancel();
  return piece.text;
}

bool OutputRelay::toConsole(const OutputSegmenter::Piece& piece) {
  if (piece.empty()) return true;
  return console_->write(source_, piece.text, piece.leavesLineOpen, piece.continuesLine, segmenter_.prefix());
}

bool OutputRelay::promptWaits() const {
  return isTerminal_ && segmenter_.hasPartial() && segmenter_.partialBytes() <= kMaxPromptBytes;
}

void OutputRelay::armPartialFlush() {
  if (partialTimerArmed_) return;
  partialTimerArmed_ = true;
  partialTimer_.expires_after(kPartialLineDelay);
  partialTimer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    self->partialTimerArmed_ = false;
    if (ec || !self->promptWaits()) return;
    self->toConsole(self->segmenter_.flushPartial());
  });
}

bool OutputRelay::toFile(int fd, const char* data, size_t n) {
  size_t done = 0;
  while (done < n) {
    const ssize_t w = ::write(fd, data + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      spdlog::warn("cannot write {}: {}",
                   fd == file_   ? fileName_
                   : fd == copy_ ? "a worker's stacks file"
                                 : "a filtered log",
                   std::strerror(errno));
      return false;
    }
    done += static_cast<size_t>(w);
  }
  return true;
}

}  // namespace ddprun::launcher
