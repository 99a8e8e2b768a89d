#include "common/log_text.hpp"

#include <cstdio>

namespace ddprun {
namespace {
bool plain(unsigned char c) { return c >= 0x20 && c < 0x7f && c != '\\'; }
}  // namespace

std::string printable(std::string_view text, size_t maxBytes) {
  const std::string_view shown = text.substr(0, maxBytes);
  std::string out;
  out.reserve(shown.size() + 8);
  for (const char ch : shown) {
    const auto c = static_cast<unsigned char>(ch);
    if (plain(c)) {
      out.push_back(ch);
    } else if (c == '\\') {
      out += "\\\\";
    } else {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  if (shown.size() < text.size()) out += "...";
  return out;
}

bool isPrintableName(std::string_view text, size_t maxBytes) {
  if (text.empty() || text.size() > maxBytes) return false;
  for (const char ch : text) {
    if (!plain(static_cast<unsigned char>(ch))) return false;
  }
  return true;
}

}  // namespace ddprun
