#pragma once
// Text from outside the process (another node's id, a value read from a store) made safe to put in a log line.
#include <cstddef>
#include <string>
#include <string_view>

namespace ddprun {

/// `text` with every byte outside printable ASCII (control characters such as ESC or a newline, and any byte
/// >= 0x7f) written as \xNN and a backslash as \\, cut to `maxBytes` of input with "..." after it: one log line
/// stays one line, and another node's text cannot forge a line or move the terminal's cursor.
std::string printable(std::string_view text, size_t maxBytes = 256);

/// Whether `text` is non-empty, at most `maxBytes` long and printable ASCII only (what printable() leaves as is).
bool isPrintableName(std::string_view text, size_t maxBytes = 256);

}  // namespace ddprun
