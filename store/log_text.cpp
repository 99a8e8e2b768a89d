#include "store/log_text.hpp"

#include <spdlog/spdlog.h>

namespace ddprun::store {

std::string escapeForLog(std::string_view bytes, size_t maxBytes) {
  std::string out;
  const size_t shown = std::min(bytes.size(), maxBytes);
  out.reserve(shown + 16);
  for (size_t i = 0; i < shown; ++i) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    switch (c) {
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\\': out += "\\\\"; break;
      default:
        if (c >= 0x20 && c < 0x7F) {
          out.push_back(static_cast<char>(c));
        } else {
          static const char* hex = "0123456789abcdef";
          out += "\\x";
          out.push_back(hex[c >> 4]);
          out.push_back(hex[c & 15]);
        }
    }
  }
  if (shown < bytes.size()) out += "...(" + std::to_string(bytes.size()) + " bytes)";
  return out;
}

void WarningLimiter::warn(const std::string& category, const std::string& line) {
  const auto now = clock_.now();
  Window& w = windows_[category];
  if (now - w.start >= interval_) {
    if (w.suppressed > 0) {
      spdlog::warn("{} ({} similar warnings suppressed in the last {} s)", line, w.suppressed,
                   std::chrono::duration_cast<std::chrono::seconds>(now - w.start).count());
      w = Window{now, 1, 0};
      return;
    }
    w = Window{now, 0, 0};
  }
  if (w.written < burst_) {
    ++w.written;
    spdlog::warn("{}", line);
  } else {
    ++w.suppressed;
  }
}

}  // namespace ddprun::store
