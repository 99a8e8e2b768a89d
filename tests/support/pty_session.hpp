#pragma once
// Test helper: a program run on a pseudo-terminal, as from an interactive shell. The terminal is its
// stdin, stdout and stderr and its controlling terminal, and it is the terminal's foreground process group,
// so Ctrl-Z, isatty() and terminal reads behave as for a user at a terminal.
#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "support/child_process.hpp"

namespace ddprun::test {

class PtySession {
 public:
  /// Starts `program` (a path) with `args` and ddprun's environment plus `env`. Throws on failure.
  PtySession(const std::string& program, const std::vector<std::string>& args,
             const std::map<std::string, std::string>& env = {});
  /// Kills the program if it still runs.
  ~PtySession();
  PtySession(const PtySession&) = delete;
  PtySession& operator=(const PtySession&) = delete;

  /// Reads the terminal until `text` has appeared (anywhere in the output so far) or `timeout` passed.
  bool waitFor(const std::string& text, std::chrono::milliseconds timeout);
  /// Types `input` at the terminal ("\x1a" is Ctrl-Z, "\x03" Ctrl-C).
  void send(const std::string& input);
  /// Everything the program wrote to the terminal so far.
  const std::string& output() const { return output_; }
  pid_t pid() const { return pid_; }
  /// Whether the terminal is in its ordinary (cooked) mode: line editing (ICANON) and echo on, as a shell needs it.
  bool cookedMode() const;
  /// Waits for the program to end (killing it after `timeout`), reading the terminal meanwhile.
  ChildResult wait(std::chrono::milliseconds timeout);

 private:
  void readAvailable(std::chrono::milliseconds wait);

  int master_ = -1;
  pid_t pid_ = -1;
  bool reaped_ = false;
  std::string output_;
};

/// The state letter of /proc/<pid>/stat ('R', 'S', 'T' stopped, 'Z'), or '?' when the process is gone.
char processState(pid_t pid);

}  // namespace ddprun::test
