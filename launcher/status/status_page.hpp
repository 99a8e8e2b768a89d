#pragma once
// The status page (status_page.html), embedded into the binary at build time by embed_file.cmake.
#include <string>
#include <string_view>

namespace ddprun::status {

/// The whole self-contained HTML page: inline CSS and JavaScript that poll /status.json every second.
std::string_view statusPageHtml();

/// The same page as a self-contained report of a finished job: `status` (a /status.json document) is embedded
/// in it, and the page renders it once, opened from a file, without polling.
std::string reportPageHtml(const std::string& statusJson);

}  // namespace ddprun::status
