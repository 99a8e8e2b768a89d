#pragma once
// Test helper: Debian's headless Chromium, as root on a machine with no network of its own.
#include <string>
#include <vector>

#include "support/child_process.hpp"

namespace ddprun::test {

inline const std::string kChromium = "/usr/bin/chromium";

/// Runs headless Chromium on `url` with `extra` flags and a fresh profile, stdout and stderr to files
/// (`<stem>.out`, `<stem>.err`). Flags: no sandbox (tests run as root), no GPU, no network of its own.
ChildResult runChromium(const std::string& url, const std::vector<std::string>& extra, const std::string& stem);

/// Why Chromium cannot render here ("" when it can): missing, or unable to show about:blank.
std::string chromiumProblem(const std::string& scratchDir);

}  // namespace ddprun::test
