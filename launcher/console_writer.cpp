#include "launcher/console_writer.hpp"

#include <unistd.h>

#include <cerrno>
#include <vector>

namespace ddprun::launcher {

namespace {

/// What waits for the reader of each console: 4 MiB is some seconds of even a chatty job.
constexpr size_t kConsoleCapacity = 4u << 20;

std::string sourceName(ConsoleWriter::Source source) {
  return source == ConsoleWriter::kSelf ? "ddprun" : "rank " + std::to_string(source);
}

/// write(2) all of `data`, retrying short writes; gives up on a hard error (a closed pipe: EPIPE, since
/// ddprun ignores SIGPIPE), because nobody can read the rest anyway.
void writeAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

}  // namespace

ConsoleWriter::ConsoleWriter(int fd, size_t capacityBytes)
    : fd_(fd), capacity_(capacityBytes), thread_([this] { run(); }) {}

ConsoleWriter::~ConsoleWriter() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  // A thread stuck in write(2) on a reader that never reads cannot be joined; the process ends anyway.
  if (flush(std::chrono::milliseconds(0)) && thread_.joinable()) {
    thread_.join();
  } else {
    thread_.detach();
  }
}

void ConsoleWriter::queueLocked(std::string_view bytes) {
  queue_.emplace_back(bytes);
  queuedBytes_ += bytes.size();
}

void ConsoleWriter::endOpenLineLocked() {
  if (!lineOpen_) return;
  queueLocked("\n");
  broken_.insert(openLineOwner_);
  lineOpen_ = false;
}

void ConsoleWriter::noteDropsLocked() {
  // Called when there is room again: the notice takes the place of what was lost.
  for (const auto& [source, bytes] : dropped_) {
    endOpenLineLocked();
    queueLocked("[ddprun] " + std::to_string(bytes) + " bytes of " + sourceName(source) +
                " output dropped: the console did not keep up (files under --log-dir have everything)\n");
  }
  dropped_.clear();
}

bool ConsoleWriter::write(Source source, std::string_view bytes, bool leavesLineOpen, bool continuesLine,
                          std::string_view prefix) {
  if (bytes.empty()) return true;
  {
    std::lock_guard lock(mutex_);
    if (queuedBytes_ + bytes.size() > capacity_) {
      dropped_[source] += bytes.size();
      droppedTotal_ += bytes.size();
      return false;
    }
    if (!dropped_.empty() && queuedBytes_ + bytes.size() < capacity_ / 2) noteDropsLocked();
    if (openLineOwner_ != source) endOpenLineLocked();  // another source's progress bar or prompt ends here
    if (continuesLine && broken_.count(source)) queueLocked(prefix);
    broken_.erase(source);
    queueLocked(bytes);
    lineOpen_ = leavesLineOpen;
    openLineOwner_ = source;
  }
  wake_.notify_one();
  return true;
}

bool ConsoleWriter::flush(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (!dropped_.empty()) noteDropsLocked();
  wake_.notify_one();
  return drained_.wait_for(lock, timeout, [this] { return queue_.empty() && !writing_; });
}

size_t ConsoleWriter::droppedBytes() const {
  std::lock_guard lock(mutex_);
  return droppedTotal_;
}

void ConsoleWriter::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left
    // Take everything queued at once: one write(2) for many small lines.
    std::string chunk;
    chunk.reserve(queuedBytes_);
    for (auto& piece : queue_) chunk += piece;
    queue_.clear();
    writing_ = true;
    lock.unlock();
    writeAll(fd_, chunk);
    lock.lock();
    queuedBytes_ -= std::min(queuedBytes_, chunk.size());
    writing_ = false;
    if (queue_.empty()) drained_.notify_all();
  }
}

ConsoleWriter& consoleOut() {
  // Never destroyed: a writer stuck on a reader must not hold up the process's exit.
  static ConsoleWriter* writer = new ConsoleWriter(STDOUT_FILENO, kConsoleCapacity);
  return *writer;
}

ConsoleWriter& consoleErr() {
  static ConsoleWriter* writer = new ConsoleWriter(STDERR_FILENO, kConsoleCapacity);
  return *writer;
}

void flushConsoles(std::chrono::milliseconds timeout) {
  consoleOut().flush(timeout);
  consoleErr().flush(timeout);
}

}  // namespace ddprun::launcher
