#include "launcher/log_layout.hpp"

#include <stdlib.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "common/empty_dirs.hpp"
#include "common/error.hpp"

namespace ddprun::launcher {
namespace fs = std::filesystem;

namespace {

/// mkdtemp(`pattern` + "XXXXXX"); throws naming what it was for.
std::string makeUniqueDir(const std::string& pattern, const std::string& what) {
  std::string path = pattern + "XXXXXX";
  if (::mkdtemp(path.data()) == nullptr)
    throw Error("cannot create " + what + " " + path + ": " + std::strerror(errno));
  return path;
}

/// Where the temporary log dir goes, as std::filesystem::temp_directory_path chooses it (the first of TMPDIR, TMP,
/// TEMP and TEMPDIR that is set, else /tmp), with the variable that named it ("" for /tmp). Throws ConfigError naming
/// the variable and its path when that is no directory (temp_directory_path's own message names neither).
std::pair<fs::path, std::string> temporaryDirectory() {
  for (const char* name : {"TMPDIR", "TMP", "TEMP", "TEMPDIR"}) {
    const char* value = std::getenv(name);
    if (value == nullptr || *value == '\0') continue;
    std::error_code ec;
    const fs::file_status status = fs::status(value, ec);
    if (ec || !fs::is_directory(status)) {
      throw ConfigError(std::string(name) + "=" + value + ": " + (ec ? ec.message() : std::string("not a directory")) +
                        "; ddprun makes its temporary log dir there when --log-dir is not given: set " + name +
                        " to a directory, or give --log-dir");
    }
    return {value, name};
  }
  return {"/tmp", ""};
}

}  // namespace

int maskFor(const std::map<int, int>& masks, int localRank) {
  auto it = masks.find(localRank);
  if (it != masks.end()) return it->second;
  it = masks.find(-1);
  return it != masks.end() ? it->second : 0;
}

bool writesLogFiles(const LogOptions& options) {
  auto any = [](const std::map<int, int>& masks) {
    return std::any_of(masks.begin(), masks.end(), [](const auto& entry) { return entry.second != 0; });
  };
  return any(options.redirects) || any(options.tee);
}

WorkerLogPaths workerLogPaths(const std::string& runDir, int attempt, int localRank, const LogOptions& options) {
  WorkerLogPaths paths;
  const fs::path dir = fs::path(runDir) / ("attempt_" + std::to_string(attempt)) / std::to_string(localRank);
  paths.dir = dir.string();
  paths.errorFile = (dir / "error.json").string();
  paths.progressFile = (dir / "progress").string();
  paths.stacksFile = (dir / "stacks.txt").string();
  const int redirect = maskFor(options.redirects, localRank);
  const int tee = maskFor(options.tee, localRank);
  const auto& filter = options.localRanksFilter;
  const bool shown = filter.empty() || std::find(filter.begin(), filter.end(), localRank) != filter.end();
  if ((redirect | tee) & 1) paths.stdoutFile = (dir / "stdout.log").string();
  if ((redirect | tee) & 2) paths.stderrFile = (dir / "stderr.log").string();
  // Redirect = file only; tee = file and console (torchrun's -r and -t).
  paths.stdoutToConsole = shown && !((redirect & 1) && !(tee & 1));
  paths.stderrToConsole = shown && !((redirect & 2) && !(tee & 2));
  return paths;
}

RunLogDir::RunLogDir(const std::string& logDir, const std::string& runId) {
  if (logDir.empty()) {
    const auto [tmp, variable] = temporaryDirectory();
    base_ = makeUniqueDir((tmp / "ddprun_").string(),
                          variable.empty() ? "a temporary log dir" : "a temporary log dir in " + variable);
    temporary_ = true;
  } else {
    base_ = logDir;
    std::error_code ec;
    fs::create_directories(base_, ec);
    if (ec) throw Error("cannot create --log-dir " + base_ + ": " + ec.message());
  }
  path_ = makeUniqueDir((fs::path(base_) / (runId + "_")).string(), "the run's log dir");
}

void RunLogDir::prepare(const WorkerLogPaths& paths) {
  std::error_code ec;
  fs::create_directories(paths.dir, ec);
  if (ec) throw Error("cannot create the worker log dir " + paths.dir + " (--log-dir): " + ec.message());
}

void RunLogDir::finish(bool succeeded, bool keepFiles, const std::vector<std::string>& report) {
  std::error_code ec;
  if (temporary_ && succeeded && !keepFiles) {
    // Nothing worth keeping but the run's report: the attempts' directories (progress files, empty logs) go.
    for (fs::directory_iterator it(path_, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (std::find(report.begin(), report.end(), name) == report.end()) fs::remove_all(it->path(), ec);
    }
  }
  finished_ = true;
  pruneEmptyDirectories(path_);
  if (temporary_) pruneEmptyDirectories(base_);
}

RunLogDir::~RunLogDir() {
  // A run that never got to finish() (it failed to start: a port in use, say) leaves no empty directory.
  if (finished_) return;
  pruneEmptyDirectories(path_);
  if (temporary_) pruneEmptyDirectories(base_);
}

}  // namespace ddprun::launcher
