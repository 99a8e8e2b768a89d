#include "support/chromium.hpp"

#include <filesystem>

namespace ddprun::test {
namespace fs = std::filesystem;

ChildResult runChromium(const std::string& url, const std::vector<std::string>& extra, const std::string& stem) {
  const std::string profile = makeTempDir("chromium-profile");
  std::string command = kChromium +
                        " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run"
                        " --disable-background-networking --disable-component-update --disable-sync"
                        " --disable-dev-shm-usage --enable-logging=stderr --v=0 --user-data-dir=" +
                        profile;
  for (const std::string& flag : extra) command += " " + flag;
  command += " '" + url + "' > '" + stem + ".out' 2> '" + stem + ".err'";
  ChildResult result = runProcess("/bin/sh", {"-c", command}, {}, std::chrono::seconds(120));
  fs::remove_all(profile);
  return result;
}

std::string chromiumProblem(const std::string& scratchDir) {
  if (!fs::exists(kChromium)) return "chromium is not installed (tools/setup.sh installs Debian's chromium)";
  const std::string stem = scratchDir + "/probe";
  ChildResult probe = runChromium("about:blank", {"--dump-dom"}, stem);
  if (probe.exitCode != 0 || readFile(stem + ".out").find("<html") == std::string::npos) {
    return "chromium cannot start here: " + readFile(stem + ".err");
  }
  return "";
}

}  // namespace ddprun::test
