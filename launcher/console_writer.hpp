#pragma once
// ddprun's own stdout and stderr, written from a thread of their own so that supervision never waits
// for a reader: a `| less` that stops reading, a paused terminal or a stuck log shipper can hold that
// thread in write(2), never the agent's loop. The queue is bounded; when it is full, bytes are dropped and
// counted per source, and a "N bytes of rank R output dropped" notice takes their place once there is
// room again. Files under --log-dir are written elsewhere and get everything.
//
// Several sources (the ranks, ddprun's own log lines) share one console. A source may leave a line open
// (a progress bar, a prompt without a newline); when another source writes, the open line is ended
// first, and the owner's continuation later gets its prefix again, so every console line says whose it is.
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>

namespace ddprun::launcher {

class ConsoleWriter {
 public:
  /// Identifies who wrote a piece of output: a global rank, or kSelf for ddprun's own lines.
  using Source = int;
  static constexpr Source kSelf = -1;

  /// Writes to `fd` (not owned). `capacityBytes` bounds what may wait for the reader.
  ConsoleWriter(int fd, size_t capacityBytes);
  /// Stops the thread after at most `flush`'s last timeout; never blocks on a stuck reader.
  ~ConsoleWriter();
  ConsoleWriter(const ConsoleWriter&) = delete;
  ConsoleWriter& operator=(const ConsoleWriter&) = delete;

  /// Queues `bytes` from `source`; never blocks on the reader. Returns false when the bytes were dropped
  /// (queue full). Thread-safe.
  /// `leavesLineOpen`: the bytes do not end the console line (a partial line, a '\r' progress bar).
  /// `continuesLine`: the bytes continue the line `source` left open; when another source wrote in between
  /// (so that line was ended), `prefix` is put in front of them.
  bool write(Source source, std::string_view bytes, bool leavesLineOpen, bool continuesLine = false,
             std::string_view prefix = {});

  /// Waits up to `timeout` until everything queued has been written. False when the reader is stuck.
  bool flush(std::chrono::milliseconds timeout);

  /// Bytes dropped so far, all sources together (for tests and the status page).
  size_t droppedBytes() const;

 private:
  void run();
  void queueLocked(std::string_view bytes);
  void noteDropsLocked();
  void endOpenLineLocked();

  const int fd_;
  const size_t capacity_;
  mutable std::mutex mutex_;
  std::condition_variable wake_, drained_;
  std::deque<std::string> queue_;
  size_t queuedBytes_ = 0;
  bool writing_ = false;  ///< the thread holds a chunk it took from the queue
  bool stopping_ = false;
  Source openLineOwner_ = 0;
  bool lineOpen_ = false;                ///< the console's last line has no '\n' yet
  std::set<Source> broken_;              ///< sources whose open line another source ended
  std::map<Source, size_t> dropped_;     ///< not yet reported
  size_t droppedTotal_ = 0;
  std::thread thread_;
};

/// ddprun's console: one writer for its stdout and one for its stderr, alive until the process ends
/// (a writer stuck in write(2) at exit is left behind rather than joined).
ConsoleWriter& consoleOut();
ConsoleWriter& consoleErr();

/// Flushes both consoles, waiting at most `timeout` for each.
void flushConsoles(std::chrono::milliseconds timeout);

}  // namespace ddprun::launcher
