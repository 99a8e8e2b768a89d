#pragma once
// Reads one output stream of one worker (a pipe or a pseudo-terminal master) on the agent's loop and passes
// it on as it arrives: the raw bytes to the rank's log file (--redirects/--tee), and prefixed segments to
// ddprun's console (OutputSegmenter, ConsoleWriter). ddprun always reads, so a worker never blocks on its
// output, whatever the console's reader does.
#include <boost/asio.hpp>
#include <chrono>
#include <memory>
#include <string>

#include "launcher/console_writer.hpp"
#include "launcher/output_segmenter.hpp"

namespace ddprun::launcher {

class OutputRelay : public std::enable_shared_from_this<OutputRelay> {
 public:
  /// How long a partial line waits for its end before it is shown anyway (a prompt, a progress bar).
  static constexpr std::chrono::milliseconds kPartialLineDelay{50};

  /// Reads `readFd` (owned; closed at end of stream; `isTerminal`: a pseudo-terminal master). `console` may be null (not shown); `source` is the
  /// rank named in drop notices; `logFile` empty means no file. Throws ddprun::Error when the file cannot
  /// be created.
  OutputRelay(boost::asio::io_context& io, int readFd, bool isTerminal, ConsoleWriter* console, ConsoleWriter::Source source,
              std::string prefix, const std::string& logFile);
  ~OutputRelay();
  OutputRelay(const OutputRelay&) = delete;
  OutputRelay& operator=(const OutputRelay&) = delete;

  /// Starts reading; the relay keeps itself alive until end of stream.
  void start();
  /// Stops reading now (what is buffered is dropped).
  void cancel();
  /// Also appends everything read from now on to `fd` (owned from now; closed at end of stream): how a
  /// Python worker's faulthandler dump reaches its stacks file.
  void copyTo(int fd);
  /// Gives the worker's pseudo-terminal the window size of `terminal` (after SIGWINCH); nothing for a pipe.
  void copyWindowSizeFrom(int terminal);
  /// True once the stream reached its end (or was cancelled) and everything read was passed on.
  bool ended() const { return !stream_.is_open(); }
  /// When the worker last wrote to this stream (steady clock; time_point{} when never).
  std::chrono::steady_clock::time_point lastOutput() const { return lastOutput_; }

 private:
  void readMore();
  void onData(size_t n);
  void onEnd();
  void toConsole(const OutputSegmenter::Piece& piece);
  void armPartialFlush();
  void toFile(int fd, const char* data, size_t n);

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
  std::chrono::steady_clock::time_point lastOutput_{};
  std::array<char, 64 * 1024> buffer_{};
};

}  // namespace ddprun::launcher
