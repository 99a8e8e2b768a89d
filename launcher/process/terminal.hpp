#pragma once
// Descriptor pairs that carry a worker's output to ddprun: a pipe, or a pseudo-terminal when ddprun's own
// console is a terminal, so that the worker's isatty() is true and colours, tqdm and rich behave as under
// torchrun, where workers inherit the terminal.
#include <termios.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace ddprun::launcher {

/// The two ends of one output channel; both CLOEXEC. The worker gets `writeEnd` (dup2'd onto its stdout or
/// stderr); ddprun reads `readEnd` and must close its copy of `writeEnd` once the worker is started.
struct OutputChannel {
  int readEnd = -1;
  int writeEnd = -1;
  bool isTerminal = false;
};

/// A pipe. Throws ddprun::Error.
OutputChannel openPipe();

/// A pseudo-terminal: master for ddprun, slave for the worker, with output post-processing off (no "\n"
/// to "\r\n"), echo off, and the window size of `sizeFrom` (a terminal descriptor) when it has one, less
/// `narrowerBy` columns (the prefix ddprun puts before each line). Throws ddprun::Error.
OutputChannel openPseudoTerminal(int sizeFrom, int narrowerBy = 0);

/// Copies `from`'s window size to the terminal `to` (after SIGWINCH), `narrowerBy` columns narrower; nothing
/// when either is no terminal.
void copyWindowSize(int from, int to, int narrowerBy = 0);

/// Columns `text` takes on a terminal: one per UTF-8 character, none for ANSI escape sequences.
size_t visibleWidth(std::string_view text);

/// isatty(fd).
bool isTerminal(int fd);

/// True when ddprun runs in the foreground of the terminal on `fd` (its process group is the terminal's).
bool inForegroundOf(int fd);

/// A terminal's mode (termios) as it was, to be put back after a program that changed it ended without doing so
/// (pdb's readline switches the terminal to raw mode; a rank killed at its prompt leaves it there, and the shell
/// then echoes nothing).
class SavedTerminalMode {
 public:
  /// The mode of the terminal on `fd`; nullopt when `fd` is no terminal.
  static std::optional<SavedTerminalMode> of(int fd);
  /// Sets it back (after output written so far drains), only while ddprun runs in the terminal's foreground (from
  /// the background tcsetattr would stop ddprun with SIGTTOU).
  void restore() const;

 private:
  int fd_ = -1;
  termios mode_{};
};

}  // namespace ddprun::launcher
