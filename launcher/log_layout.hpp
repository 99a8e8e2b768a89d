#pragma once
// Where each worker's output and error files go, in torchrun's layout (torch 2.x DefaultLogsSpecs,
// torch/distributed/elastic/multiprocessing/api.py): <log dir>/<run id>_<random>/attempt_<n>/<local rank>/
// {stdout.log, stderr.log, error.json}. The random part makes a reused --log-dir safe: two jobs, two nodes or
// two runs with the same --rdzv-id never share, overwrite or delete each other's files. ddprun adds
// `progress` (the worker's progress reports) and, after a hang, `stacks.txt` beside each error.json.
#include <map>
#include <string>
#include <vector>

namespace ddprun::launcher {

/// The user's choices about worker output (--redirects, --tee, --local-ranks-filter, --no-tty).
struct LogOptions {
  std::map<int, int> redirects;  ///< local rank -> mask (1 stdout, 2 stderr); key -1 = every rank
  std::map<int, int> tee;
  std::vector<int> localRanksFilter;  ///< empty: every rank is shown
};

/// One worker's files and console routing.
struct WorkerLogPaths {
  std::string dir;         ///< attempt_<n>/<local rank>
  std::string stdoutFile;  ///< empty: not written to a file
  std::string stderrFile;
  std::string errorFile;     ///< TORCHELASTIC_ERROR_FILE
  std::string progressFile;  ///< DDPRUN_PROGRESS_FILE (common/progress_file.hpp)
  std::string stacksFile;    ///< where the rank's stacks are saved when the group hangs
  bool stdoutToConsole = true;
  bool stderrToConsole = true;
};

/// The mask for `localRank` from a parsed --redirects/--tee map.
int maskFor(const std::map<int, int>& masks, int localRank);

/// True when any rank's output goes to a file (--redirects or --tee).
bool writesLogFiles(const LogOptions& options);

/// Pure: the paths and routing of local rank `localRank` in attempt `attempt` under `runDir`.
WorkerLogPaths workerLogPaths(const std::string& runDir, int attempt, int localRank, const LogOptions& options);

/// The log directory of one run of ddprun.
class RunLogDir {
 public:
  /// Creates <base>/<runId>_<random>; base is `logDir` (created when missing) or, when empty, a new
  /// temporary directory. Throws ddprun::Error naming the directory.
  RunLogDir(const std::string& logDir, const std::string& runId);
  /// Without finish(): removes the empty directories the run made.
  ~RunLogDir();
  RunLogDir(const RunLogDir&) = delete;
  RunLogDir& operator=(const RunLogDir&) = delete;
  /// The base directory (--log-dir, or the temporary directory ddprun made).
  const std::string& base() const { return base_; }

  const std::string& path() const { return path_; }
  /// True when the base is a temporary directory ddprun made (no --log-dir).
  bool temporary() const { return temporary_; }

  /// Creates one worker's directory. Throws ddprun::Error naming it.
  static void prepare(const WorkerLogPaths& paths);

  /// At the end of the run: of a successful run under a temporary base that nothing was redirected into, only
  /// the files named in `report` stay (the run's report); otherwise only empty directories go (a failed or
  /// stopped run leaves nothing empty behind).
  void finish(bool succeeded, bool keepFiles, const std::vector<std::string>& report = {});

 private:
  std::string base_;
  std::string path_;
  bool temporary_ = false;
  bool finished_ = false;
};

}  // namespace ddprun::launcher
