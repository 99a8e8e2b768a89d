#include "launcher/status/status_page.hpp"

namespace ddprun::status {
namespace {
/// The page's empty data island, which the report fills.
constexpr std::string_view kIsland = "<script id=\"final-status\" type=\"application/json\"></script>";
}  // namespace

std::string reportPageHtml(const std::string& statusJson) {
  std::string page(statusPageHtml());
  // Inside a <script> element "</script" ends it, and "<!--" followed by "<script" makes the parser skip the next
  // "</script>" (HTML's script data double escaped state, WHATWG HTML 13.2.5.20): every '<' is written as "\u003c",
  // which JSON reads as '<' (in a JSON document '<' can only occur inside strings).
  std::string data;
  data.reserve(statusJson.size());
  for (char c : statusJson) {
    if (c == '<') {
      data += "\\u003c";
    } else {
      data += c;
    }
  }
  const auto at = page.find(kIsland);
  if (at == std::string::npos) return page;
  const size_t contentAt = at + kIsland.find("></script>") + 1;
  page.insert(contentAt, data);
  return page;
}

}  // namespace ddprun::status
