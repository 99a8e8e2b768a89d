#pragma once
// The status page (status_page.html), embedded into the binary at build time by embed_file.cmake.
#include <string_view>

namespace ddprun::status {

/// The whole self-contained HTML page: inline CSS and JavaScript that poll /status.json every second.
std::string_view statusPageHtml();

}  // namespace ddprun::status
