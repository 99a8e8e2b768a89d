#pragma once
// Reads one output stream of one worker (a pipe or a pseudo-terminal master) on the agent's loop and passes it
// on: the raw bytes to the rank's log file (--redirects/--tee), and prefixed segments to ddprun's console
// (OutputSegmenter, ConsoleWriter). Nothing is lost, and the console never holds up supervision:
// - a stream shown only on the console pauses when the console's queue is full: the relay stops reading, the
//   worker waits in write(2) (as under torchrun, where it writes to the terminal itself), and the relay reads on
//   once the console has taken half of what waited;
// - a stream written to a file as well (--tee) never pauses: the file gets everything at the worker's pace, and
//   a console that falls behind catches up from the file, at its own pace.
#include <boost/asio.hpp>
#include <chrono>
#include <memory>
#include <string>

#include "launcher/process/console_writer.hpp"
#include "launcher/process/output_segmenter.hpp"
#include "launcher/process/stderr_tail.hpp"

namespace ddprun::launcher {

class OutputRelay : public std::enable_shared_from_this<OutputRelay> {
 public:
  /// How long a partial line waits for its end before it is shown anyway (a prompt, a progress bar): only on a
  /// pseudo-terminal (a program writing to a pipe buffers its output and cuts its lines anywhere) and only up to
  /// kMaxPromptBytes; any other line reaches the console whole, up to OutputSegmenter's 1 MiB.
  static constexpr std::chrono::milliseconds kPartialLineDelay{50};
  static constexpr size_t kMaxPromptBytes = 1024;

  /// Reads `readFd` (owned; closed at end of stream; `isTerminal`: a pseudo-terminal master). `console` may be
  /// null (not shown); `source` names the rank; `prefix` starts its console lines; `logFile` empty means no file.
  /// Throws ddprun::Error when the file cannot be created.
  OutputRelay(boost::asio::io_context& io, int readFd, bool isTerminal, ConsoleWriter* console,
              ConsoleWriter::Source source, std::string prefix, const std::string& logFile);
  ~OutputRelay();
  OutputRelay(const OutputRelay&) = delete;
  OutputRelay& operator=(const OutputRelay&) = delete;

  /// Starts reading; the relay keeps itself alive until end of stream and until the console has had everything.
  void start();
  /// Stops reading now (what is buffered is dropped).
  void cancel();
  /// Also appends everything read from now on to `fd` (owned from now; closed at end of stream): how a
  /// Python worker's faulthandler dump reaches its stacks file.
  void copyTo(int fd);
  /// Also appends the lines that contain any of `filters` to `file`, prefixed (torchrun's
  /// --duplicate-stdout-filters). Throws ddprun::Error when the file cannot be opened.
  void duplicateLines(std::vector<std::string> filters, const std::string& file);
  /// Also keeps the end of the stream (StderrTail) from now on, for a failure record.
  void keepTail() { keepTail_ = true; }
  /// What the tail holds (StderrTail::text); "" without keepTail().
  std::string tailText() const { return tail_.text(); }
  /// Bytes the stream holds that the relay has not read yet (FIONREAD); 0 once it ended.
  size_t unreadBytes() const;
  /// Gives the worker's pseudo-terminal the window size of `terminal` less the prefix's width (after
  /// SIGWINCH), so a full-width progress bar still fits on one console line; nothing for a pipe.
  void copyWindowSizeFrom(int terminal);
  /// True once the stream reached its end (or was cancelled) and everything read was passed on.
  bool ended() const { return !stream_.is_open() && !consoleBehind_; }
  /// When the worker last wrote to this stream (steady clock; time_point{} when never).
  std::chrono::steady_clock::time_point lastOutput() const { return lastOutput_; }
  /// True while the relay does not read because the console is full (the worker may be waiting in write).
  bool held() const { return paused_; }
  /// True once the stream said a socket could not be bound because its address was in use (errno 98, as torch's
  /// TCPStore server reports "errno: 98 - Address already in use"): for the failure summary's hint.
  bool sawAddressInUse() const { return sawAddressInUse_; }
  /// Seconds the relay has not read because of the console, over its life (the current pause included).
  double heldSeconds() const;
  /// At the end of a run whose console is stuck: everything read but not shown yet (the console's share
  /// the file holds beyond what was shown, and what the stream still has), prefixed, for saving elsewhere.
  std::string takeUnshown();

 private:
  void readMore();
  void onData(size_t n);
  void onEnd();
  /// Passes `bytes` to the console; false when the console is now full.
  bool show(std::string_view bytes);
  bool toConsole(const OutputSegmenter::Piece& piece);
  void armPartialFlush();
  /// A short partial line on a pseudo-terminal (a prompt, a bar without '\r'): shown after kPartialLineDelay.
  bool promptWaits() const;
  /// The complete lines of `data` that match a duplicate filter, to the filtered file.
  void duplicate(std::string_view data);
  /// Writes all of `data` to `fd`; false (after one warning) when it cannot.
  bool toFile(int fd, const char* data, size_t n);
  /// Looks every few milliseconds whether the console has room again, then resumes (reading, or catching up).
  void waitForRoom();
  /// --tee: shows what the file holds beyond what the console has had, as far as the console takes it.
  void catchUp();

  boost::asio::posix::stream_descriptor stream_;
  bool isTerminal_;
  boost::asio::steady_timer partialTimer_;
  bool partialTimerArmed_ = false;
  ConsoleWriter* console_;
  ConsoleWriter::Source source_;
  OutputSegmenter segmenter_;
  int file_ = -1;
  int copy_ = -1;
  std::string fileName_;
  bool fileFailed_ = false;
  bool sawAddressInUse_ = false;
  bool keepTail_ = false;
  StderrTail tail_;
  std::string scanTail_;  ///< the end of the last chunk, so that a phrase cut between two reads is still seen
  std::vector<std::string> filters_;  ///< duplicate filters
  int filtered_ = -1;                 ///< the filtered file
  std::string filterLine_;            ///< the line being read, for the filters
  uint64_t fileBytes_ = 0;            ///< written to the log file
  uint64_t shownBytes_ = 0;           ///< of those, passed to the console
  bool consoleBehind_ = false;        ///< --tee: the console shows the file's bytes from shownBytes_ on
  bool paused_ = false;               ///< not reading: the console is full
  bool waitingForRoom_ = false;
  boost::asio::steady_timer roomTimer_;
  std::chrono::steady_clock::time_point pausedAt_{};
  double heldSeconds_ = 0;
  std::chrono::steady_clock::time_point lastOutput_{};
  std::array<char, 64 * 1024> buffer_{};
};

}  // namespace ddprun::launcher
