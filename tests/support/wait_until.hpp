#pragma once
// Test helper: waiting for a readiness signal instead of sleeping a fixed time. On a busy CI machine the
// wait stretches as far as it must (up to the timeout); on an idle one it ends as soon as the signal is seen.
#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "support/child_process.hpp"

namespace ddprun::test {

/// Polls `condition` every 20 ms until it holds or `timeout` passes; returns whether it held.
inline bool waitUntil(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

/// How many times `text` occurs in `haystack` (non-overlapping).
inline size_t occurrences(const std::string& haystack, const std::string& text) {
  size_t count = 0;
  for (size_t at = haystack.find(text); at != std::string::npos; at = haystack.find(text, at + text.size())) ++count;
  return count;
}

/// Waits until `child` has written `text` at least `times` times (stdout or stderr), or `timeout` passes, or the
/// child ends; returns whether the text was seen.
inline bool waitForOutput(ChildProcess& child, const std::string& text, std::chrono::milliseconds timeout,
                          size_t times = 1) {
  return waitUntil([&] { return occurrences(child.outputSoFar(), text) >= times || !child.running(); }, timeout) &&
         occurrences(child.outputSoFar(), text) >= times;
}

}  // namespace ddprun::test
