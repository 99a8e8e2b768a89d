#include "launcher/output_relay.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/error.hpp"
#include "launcher/terminal.hpp"

namespace ddprun::launcher {
namespace asio = boost::asio;

OutputRelay::OutputRelay(asio::io_context& io, int readFd, bool isTerminal, ConsoleWriter* console,
                         ConsoleWriter::Source source, std::string prefix, const std::string& logFile)
    : stream_(io, readFd), isTerminal_(isTerminal), partialTimer_(io), console_(console), source_(source), segmenter_(std::move(prefix)),
      fileName_(logFile) {
  if (!logFile.empty()) {
    file_ = ::open(logFile.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (file_ < 0) throw Error("cannot create worker log file " + logFile + ": " + std::strerror(errno));
  }
}

OutputRelay::~OutputRelay() {
  if (file_ >= 0) ::close(file_);
  if (copy_ >= 0) ::close(copy_);
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
}

void OutputRelay::copyWindowSizeFrom(int terminal) {
  if (isTerminal_ && stream_.is_open()) copyWindowSize(terminal, stream_.native_handle());
}

void OutputRelay::readMore() {
  stream_.async_read_some(asio::buffer(buffer_), [self = shared_from_this()](const boost::system::error_code& ec,
                                                                            size_t n) {
    if (n > 0) self->onData(n);
    if (ec == asio::error::operation_aborted) return;
    // EOF on a pipe; EIO on a pseudo-terminal master once every holder of the slave has closed it.
    if (ec) {
      self->onEnd();
      return;
    }
    self->readMore();
  });
}

void OutputRelay::onData(size_t n) {
  lastOutput_ = std::chrono::steady_clock::now();
  toFile(file_, buffer_.data(), n);
  if (copy_ >= 0) toFile(copy_, buffer_.data(), n);
  if (console_ == nullptr) return;
  toConsole(segmenter_.feed(std::string_view(buffer_.data(), n)));
  if (segmenter_.hasPartial()) armPartialFlush();
}

void OutputRelay::onEnd() {
  partialTimer_.cancel();
  if (console_ != nullptr) toConsole(segmenter_.finish());
  boost::system::error_code ec;
  stream_.close(ec);
  for (int* fd : {&file_, &copy_}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

void OutputRelay::toConsole(const OutputSegmenter::Piece& piece) {
  if (piece.empty()) return;
  console_->write(source_, piece.text, piece.leavesLineOpen, piece.continuesLine, segmenter_.prefix());
}

void OutputRelay::armPartialFlush() {
  if (partialTimerArmed_) return;
  partialTimerArmed_ = true;
  partialTimer_.expires_after(kPartialLineDelay);
  partialTimer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    self->partialTimerArmed_ = false;
    if (ec) return;
    self->toConsole(self->segmenter_.flushPartial());
  });
}

void OutputRelay::toFile(int fd, const char* data, size_t n) {
  if (fd < 0) return;
  size_t done = 0;
  while (done < n) {
    const ssize_t w = ::write(fd, data + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (!fileFailed_) spdlog::warn("cannot write worker log file {}: {}", fileName_, std::strerror(errno));
      fileFailed_ = true;
      return;
    }
    done += static_cast<size_t>(w);
  }
}

}  // namespace ddprun::launcher
