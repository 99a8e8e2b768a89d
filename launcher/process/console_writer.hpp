#pragma once
// ddprun's own stdout and stderr, written so that supervision never waits for a reader: producers only queue bytes, and
// a thread of the writer's own, started at the first write, writes them in order, so a `| less` that stops reading, a
// paused terminal or a stuck log shipper can hold that thread, never the agent's loop. Nothing is dropped: the queue
// has a capacity, and a producer that finds it full stops producing until the queue has drained to half (hasRoom): a
// worker's output relay then stops reading the worker's pipe, and the worker waits in write(2), as it would under
// torchrun. Memory stays bounded (the capacity plus what each producer had read when it stopped).
//
// Several sources (the ranks, ddprun's own log lines) share one console. A source may leave a line open (a
// progress bar, a prompt without a newline). On a pipe or file, when another source writes, the open line is
// ended first, and the owner's continuation later gets its prefix again, so every console line says whose it
// is. On a terminal, the open lines are kept in a live region at the bottom of the screen, one line per source,
// redrawn in place (ANSI cursor movement) while complete lines scroll above it: each rank's progress bar stays on
// its own line.
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace ddprun::launcher {

class ConsoleWriter {
 public:
  /// Identifies who wrote a piece of output: a global rank, or kSelf for ddprun's own lines.
  using Source = int;
  static constexpr Source kSelf = -1;

  /// Writes to `fd` (not owned). `capacityBytes` is what may wait for the reader before producers are asked to
  /// stop. `terminal`: `fd` is a terminal, so open lines live in a region at the bottom of the screen.
  ConsoleWriter(int fd, size_t capacityBytes, bool terminal = false);
  /// Stops the thread after it wrote what is queued, never blocking on a stuck reader (it is then left behind).
  ~ConsoleWriter();
  ConsoleWriter(const ConsoleWriter&) = delete;
  ConsoleWriter& operator=(const ConsoleWriter&) = delete;

  /// Queues `bytes` from `source`; never blocks, never drops. Returns false when the queue is now at or over its
  /// capacity: the caller should produce nothing more until whenRoom() calls back. Thread-safe.
  /// `leavesLineOpen`: the bytes do not end the console line (a partial line, a '\r' progress bar).
  /// `continuesLine`: the bytes continue the line `source` left open; when another source wrote in between
  /// (so that line was ended), `prefix` is put in front of them.
  bool write(Source source, std::string_view bytes, bool leavesLineOpen, bool continuesLine = false,
             std::string_view prefix = {});

  /// True when the queue has drained to half its capacity: a producer that paused may go on. (Not const: where the
  /// thread could not be started yet, this tries again.)
  bool hasRoom();

  /// Waits up to `timeout` until everything queued has been written. False when the reader is stuck.
  bool flush(std::chrono::milliseconds timeout);
  /// Waits until everything queued has been written, for as long as the reader keeps taking bytes: false once it
  /// took nothing for `idle` (a stuck reader) while bytes were waiting.
  bool drain(std::chrono::milliseconds idle);
  /// Takes what is queued and not written yet (to save it elsewhere when the reader is stuck).
  std::string takeUnwritten();
  /// Bytes written to the console so far.
  uint64_t written() const;
  /// Bytes waiting for the reader.
  size_t queued() const;
  /// The terminal's width in columns (after SIGWINCH); lines of the live region are cut to it.
  void setColumns(int columns);
  /// Whether the writer's thread runs (it starts at the first write).
  bool threadStarted() const;

 private:
  struct OpenLine {
    Source source = 0;
    std::string text;      ///< what the line shows now (prefix and content, no terminator)
    bool replace = false;  ///< it ended with '\r': the next segment replaces the text
  };

  void run();
  /// Starts the thread if it does not run yet. Where it cannot be started now (EAGAIN: pids.max, RLIMIT_NPROC) the
  /// bytes stay queued and the next write, flush or look for room tries again: ddprun goes on without its console.
  void startThreadLocked();
  void queueLocked(std::string_view bytes);
  /// Everything queued, as one string, and the queue emptied (queuedBytes_ still counts it until written).
  std::string takeQueueLocked();
  void endOpenLineLocked();
  void writePipeLocked(Source source, std::string_view bytes, bool leavesLineOpen, bool continuesLine,
                       std::string_view prefix);
  void writeTerminalLocked(Source source, std::string_view bytes);
  OpenLine* openLineLocked(Source source);
  /// Moves the cursor to the start of the live region and clears it; redrawRegionLocked() draws it again.
  void clearRegionLocked();
  void redrawRegionLocked();

  const int fd_;
  const size_t capacity_;
  const bool terminal_;
  mutable std::mutex mutex_;
  std::condition_variable wake_, drained_;
  std::deque<std::string> queue_;
  size_t queuedBytes_ = 0;
  bool writing_ = false;     ///< the thread holds a chunk it took from the queue
  std::string inFlight_;     ///< that chunk, written piece by piece
  size_t inFlightDone_ = 0;  ///< bytes of it written, or in a write(2) the reader had room for
  bool abandoned_ = false;   ///< takeUnwritten() took the rest: the writer drops it
  bool stopping_ = false;
  uint64_t written_ = 0;
  // Pipes and files: the one open line.
  Source openLineOwner_ = 0;
  bool lineOpen_ = false;    ///< the console's last line has no '\n' yet
  std::set<Source> broken_;  ///< sources whose open line another source ended
  // Terminals: the live region.
  std::vector<OpenLine> region_;
  size_t drawnLines_ = 0;  ///< region lines on screen now
  int columns_ = 0;        ///< 0: unknown
  bool threadStarted_ = false;
  std::thread thread_;
};

/// ddprun's console: one writer for its stdout and one for its stderr (the same writer when both are the same
/// terminal, so that one live region serves both), alive until the process ends (a writer stuck in write(2) at
/// exit is left behind rather than joined).
ConsoleWriter& consoleOut();
ConsoleWriter& consoleErr();

/// Flushes both consoles, waiting at most `timeout` for each.
void flushConsoles(std::chrono::milliseconds timeout);

}  // namespace ddprun::launcher
