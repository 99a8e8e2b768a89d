#include "launcher/process/console_writer.hpp"

#include <poll.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <system_error>

#include "launcher/process/terminal.hpp"

namespace ddprun::launcher {

namespace {

/// What waits for the reader of each console before producers pause: 4 MiB is some seconds of a chatty job.
constexpr size_t kConsoleCapacity = 4u << 20;
/// The largest single write(2): PIPE_BUF, so a write to a pipe is all or nothing.
constexpr size_t kPieceBytes = PIPE_BUF;

/// write(2) all of `data`, retrying short writes; gives up on a hard error (a closed pipe: EPIPE, since
/// ddprun ignores SIGPIPE), because nobody can read the rest anyway. Returns the bytes written.
size_t writeAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return done;
    done += static_cast<size_t>(n);
  }
  return done;
}

/// Waits up to `timeout` until `fd` takes a write without blocking (a pipe: room for PIPE_BUF bytes). An
/// error or hang-up counts as ready: the write that follows then fails at once.
bool waitWritable(int fd, std::chrono::milliseconds timeout) {
  pollfd entry{fd, POLLOUT, 0};
  const int n = ::poll(&entry, 1, static_cast<int>(timeout.count()));
  return n != 0;  // ready, an error on the fd, or EINTR (the loop looks again)
}

/// `text` cut to `columns` visible columns: ANSI escape sequences (colours) take none, a UTF-8 character one.
std::string fitColumns(const std::string& text, int columns) {
  if (columns <= 0) return text;
  std::string out;
  int used = 0;
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == 0x1b && i + 1 < text.size() && text[i + 1] == '[') {  // CSI: up to its final byte
      size_t end = i + 2;
      while (end < text.size() && (static_cast<unsigned char>(text[end]) < 0x40 || text[end] > 0x7e)) ++end;
      out.append(text, i, end + 1 - i);
      i = end + 1;
      continue;
    }
    size_t length = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 1;
    if (used == columns) break;
    out.append(text, i, length);
    ++used;
    i += length;
  }
  return out;
}

}  // namespace

ConsoleWriter::ConsoleWriter(int fd, size_t capacityBytes, bool terminal)
    : fd_(fd), capacity_(capacityBytes), terminal_(terminal) {}

void ConsoleWriter::startThreadLocked() {
  if (threadStarted_ || queue_.empty()) return;
  try {
    thread_ = std::thread([this] { run(); });  // it takes the mutex once the caller lets go of it
  } catch (const std::system_error&) {
    return;  // the bytes stay queued until a later call starts the thread
  }
  threadStarted_ = true;
}

std::string ConsoleWriter::takeQueueLocked() {
  std::string all;
  for (auto& piece : queue_) all += piece;
  queue_.clear();
  return all;
}

ConsoleWriter::~ConsoleWriter() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (!thread_.joinable()) return;  // never started: nothing was written
  // A thread stuck in write(2) on a reader that never reads cannot be joined; the process ends anyway.
  if (flush(std::chrono::milliseconds(0))) {
    thread_.join();
  } else {
    thread_.detach();
  }
}

void ConsoleWriter::queueLocked(std::string_view bytes) {
  if (bytes.empty()) return;
  queue_.emplace_back(bytes);
  queuedBytes_ += bytes.size();
}

void ConsoleWriter::endOpenLineLocked() {
  if (!lineOpen_) return;
  queueLocked("\n");
  broken_.insert(openLineOwner_);
  lineOpen_ = false;
}

bool ConsoleWriter::write(Source source, std::string_view bytes, bool leavesLineOpen, bool continuesLine,
                          std::string_view prefix) {
  if (bytes.empty()) return true;
  bool room = true;
  {
    std::lock_guard lock(mutex_);
    if (terminal_) {
      writeTerminalLocked(source, bytes);
    } else {
      writePipeLocked(source, bytes, leavesLineOpen, continuesLine, prefix);
    }
    startThreadLocked();
    room = queuedBytes_ < capacity_;
  }
  wake_.notify_one();
  return room;
}

void ConsoleWriter::writePipeLocked(Source source, std::string_view bytes, bool leavesLineOpen, bool continuesLine,
                                    std::string_view prefix) {
  if (openLineOwner_ != source) endOpenLineLocked();  // another source's progress bar or prompt ends here
  if (continuesLine && broken_.count(source)) queueLocked(prefix);
  broken_.erase(source);
  queueLocked(bytes);
  lineOpen_ = leavesLineOpen;
  openLineOwner_ = source;
}

ConsoleWriter::OpenLine* ConsoleWriter::openLineLocked(Source source) {
  for (auto& line : region_) {
    if (line.source == source) return &line;
  }
  return nullptr;
}

void ConsoleWriter::clearRegionLocked() {
  if (drawnLines_ == 0) return;
  std::string moves = "\r";
  for (size_t i = 1; i < drawnLines_; ++i) moves += "\x1b[1A";
  moves += "\x1b[J";
  queueLocked(moves);
  drawnLines_ = 0;
}

void ConsoleWriter::redrawRegionLocked() {
  // The cursor stays at the end of the last line, where a prompt's answer is echoed.
  std::string text;
  for (size_t i = 0; i < region_.size(); ++i) {
    if (i > 0) text += '\n';
    text += fitColumns(region_[i].text, columns_ > 1 ? columns_ - 1 : 0);
  }
  queueLocked(text);
  drawnLines_ = region_.size();
}

void ConsoleWriter::writeTerminalLocked(Source source, std::string_view bytes) {
  // Segments end after '\n' (a complete line: it scrolls above the region) or '\r' (the line will be redrawn);
  // the rest is the open line's text so far.
  bool regionCleared = false;
  const auto clearOnce = [&] {
    if (!regionCleared) clearRegionLocked();
    regionCleared = true;
  };
  size_t start = 0;
  while (start < bytes.size()) {
    size_t end = bytes.find_first_of("\r\n", start);
    const bool terminated = end != std::string_view::npos;
    if (!terminated) end = bytes.size();
    const std::string_view content = bytes.substr(start, end - start);
    const char terminator = terminated ? bytes[end] : '\0';
    start = terminated ? end + 1 : end;
    OpenLine* line = openLineLocked(source);
    if (line == nullptr && terminator == '\n') {
      // A whole line with nothing open: it only has to pass the region.
      clearOnce();
      queueLocked(content);
      queueLocked("\n");
      continue;
    }
    if (line == nullptr) {
      region_.push_back({source, "", false});
      line = &region_.back();
    }
    if (line->replace && !(terminator == '\n' && content.empty())) {
      line->text.assign(content);  // a redraw ("\r", then the new text); "\r\n" ends the drawn line as it is
    } else {
      line->text.append(content);
    }
    line->replace = terminator == '\r';
    clearOnce();
    if (terminator == '\n') {
      queueLocked(line->text);
      queueLocked("\n");
      region_.erase(region_.begin() + (line - region_.data()));
    }
  }
  if (regionCleared) redrawRegionLocked();
}

bool ConsoleWriter::hasRoom() {
  std::lock_guard lock(mutex_);
  startThreadLocked();
  return queuedBytes_ <= capacity_ / 2;
}

bool ConsoleWriter::flush(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  startThreadLocked();
  wake_.notify_one();
  return drained_.wait_for(lock, timeout, [this] { return queue_.empty() && !writing_; });
}

bool ConsoleWriter::drain(std::chrono::milliseconds idle) {
  std::unique_lock lock(mutex_);
  startThreadLocked();
  wake_.notify_one();
  uint64_t seen = written_;
  while (!(queue_.empty() && !writing_)) {
    const bool moved = drained_.wait_for(lock, idle, [&] { return (queue_.empty() && !writing_) || written_ != seen; });
    if (!moved) return false;
    seen = written_;
  }
  return true;
}

std::string ConsoleWriter::takeUnwritten() {
  std::lock_guard lock(mutex_);
  // A piece in write(2) now is counted as written: the writer only writes after poll(2) said the reader has
  // room for it, so the kernel takes it whole at once.
  std::string text = inFlight_.substr(std::min(inFlight_.size(), inFlightDone_));
  for (auto& piece : queue_) text += piece;
  queuedBytes_ = 0;
  queue_.clear();
  if (writing_) abandoned_ = true;  // the writer stops after the piece it is in (an idle one has nothing to stop)
  return text;
}

uint64_t ConsoleWriter::written() const {
  std::lock_guard lock(mutex_);
  return written_;
}

size_t ConsoleWriter::queued() const {
  std::lock_guard lock(mutex_);
  return queuedBytes_;
}

void ConsoleWriter::setColumns(int columns) {
  std::lock_guard lock(mutex_);
  columns_ = columns;
}

bool ConsoleWriter::threadStarted() const {
  std::lock_guard lock(mutex_);
  return threadStarted_;
}

void ConsoleWriter::run() {
  ::pthread_setname_np(::pthread_self(), "ddprun-console");
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left
    // Take everything queued at once and write it in pieces no larger than an atomic pipe write, each only when
    // the reader has room for it: the writer never sits in a write(2) the reader does not take, so whatever a
    // stuck reader has not taken can be taken back exactly (takeUnwritten).
    inFlight_ = takeQueueLocked();
    inFlightDone_ = 0;
    writing_ = true;
    while (inFlightDone_ < inFlight_.size() && !abandoned_) {
      lock.unlock();
      const bool ready = waitWritable(fd_, std::chrono::milliseconds(100));
      lock.lock();
      if (abandoned_) break;
      if (!ready) continue;  // look again for abandoned_, then wait on
      const size_t size = std::min<size_t>(kPieceBytes, inFlight_.size() - inFlightDone_);
      const std::string piece = inFlight_.substr(inFlightDone_, size);
      inFlightDone_ += size;
      lock.unlock();
      const size_t wrote = writeAll(fd_, piece);
      lock.lock();
      written_ += wrote;
      if (!abandoned_) queuedBytes_ -= std::min(queuedBytes_, size);
      if (wrote < size) {  // a hard error (the reader closed): nobody can read the rest
        if (!abandoned_) queuedBytes_ -= std::min(queuedBytes_, inFlight_.size() - inFlightDone_);
        break;
      }
      drained_.notify_all();
    }
    inFlight_.clear();
    inFlightDone_ = 0;
    abandoned_ = false;
    writing_ = false;
    drained_.notify_all();
  }
}

namespace {

/// Whether stdout and stderr are the same terminal (then one writer, and one live region, serves both).
bool sameTerminal() {
  struct stat out {
  }, err{};
  return isTerminal(STDOUT_FILENO) && isTerminal(STDERR_FILENO) && ::fstat(STDOUT_FILENO, &out) == 0 &&
         ::fstat(STDERR_FILENO, &err) == 0 && out.st_rdev == err.st_rdev;
}

int terminalColumns(int fd) {
  struct winsize size {};
  return ::ioctl(fd, TIOCGWINSZ, &size) == 0 ? size.ws_col : 0;
}

ConsoleWriter* makeConsole(int fd) {
  auto* writer = new ConsoleWriter(fd, kConsoleCapacity, isTerminal(fd));
  if (isTerminal(fd)) writer->setColumns(terminalColumns(fd));
  return writer;
}

}  // namespace

ConsoleWriter& consoleOut() {
  // Never destroyed: a writer stuck on a reader must not hold up the process's exit.
  static ConsoleWriter* writer = makeConsole(STDOUT_FILENO);
  return *writer;
}

/// Whether stdout and stderr are one pipe or file (2>&1): then one writer serves both, so that a line of one is never
/// cut by pieces of the other (each writer writes in PIPE_BUF pieces).
bool sameTarget() {
  struct stat out {
  }, err{};
  return ::fstat(STDOUT_FILENO, &out) == 0 && ::fstat(STDERR_FILENO, &err) == 0 && out.st_dev == err.st_dev &&
         out.st_ino == err.st_ino;
}

ConsoleWriter& consoleErr() {
  static ConsoleWriter* writer = sameTerminal() || sameTarget() ? &consoleOut() : makeConsole(STDERR_FILENO);
  return *writer;
}

void flushConsoles(std::chrono::milliseconds timeout) {
  consoleOut().flush(timeout);
  if (&consoleErr() != &consoleOut()) consoleErr().flush(timeout);
}

}  // namespace ddprun::launcher
