#include "launcher/status/status_page.hpp"

namespace ddprun::status {
namespace {
/// The page's empty data island, which the report fills.
constexpr std::string_view kIsland = "<script id=\"final-status\" type=\"application/json\"></script>";
}  // namespace

std::string reportPageHtml(const std::string& statusJson) {
  std::string page(statusPageHtml());
  // Inside a <script> element only "</" can end it early: written as "<\/", which JSON reads as "</".
  std::string data;
  data.reserve(statusJson.size());
  for (size_t i = 0; i < statusJson.size(); ++i) {
    data += statusJson[i];
    if (statusJson[i] == '<' && i + 1 < statusJson.size() && statusJson[i + 1] == '/') data += '\\';
  }
  const auto at = page.find(kIsland);
  if (at == std::string::npos) return page;
  const size_t contentAt = at + kIsland.find("></script>") + 1;
  page.insert(contentAt, data);
  return page;
}

}  // namespace ddprun::status
