// worker: parses flags, wires data, communicator, model and trainer together, and turns any uncaught
// error into torchelastic's error file plus a non-zero exit.
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <filesystem>
#include <optional>

#include "common/env.hpp"
#include "common/error_file.hpp"
#include "common/forkserver.hpp"
#include "common/spare_rank.hpp"
#include "worker/comm/devices.hpp"
#include "worker/comm/dist_env.hpp"
#include "worker/comm/make_communicator.hpp"
#include "worker/failure_report.hpp"
#include "worker/flag_checks.hpp"
#include "worker/log_setup.hpp"
#include "worker/mnist_data.hpp"
#include "worker/models.hpp"
#include "worker/options.hpp"
#include "worker/spare_warmup.hpp"
#include "worker/trainer.hpp"
#include "worker/warning_signals.hpp"

namespace {
using namespace ddprun;
using namespace ddprun::worker;

void configureThreads(const WorkerOptions& options) {
  // LibTorch's default on small VMs is one thread whatever OMP_NUM_THREADS says, so set it explicitly.
  int64_t threads = options.threads > 0 ? options.threads : getEnvInt("OMP_NUM_THREADS", 0);
  if (threads > 0) torch::set_num_threads(static_cast<int>(threads));
}

std::string defaultDataDir(DatasetKind kind) {
  if (kind == DatasetKind::kFashionMnist) return kDebianFashionMnistDir;
  if (auto dir = getEnv("DDPRUN_DATA_DIR")) return *dir;
  // data/mnist in the working directory (the source tree), else the sample installed beside this program
  // (<prefix>/bin/ddprun-worker -> <prefix>/share/ddprun/data/mnist), so an installed worker runs from any directory.
  std::error_code ec;
  if (std::filesystem::is_directory("data/mnist", ec)) return "data/mnist";
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto installed = self.parent_path().parent_path() / "share/ddprun/data/mnist";
    if (std::filesystem::is_directory(installed, ec)) return installed.string();
  }
  return "data/mnist";
}

/// "rank R on DEVICE" once the placement is known; GPU failures name it.
std::string& failureContext() {
  static std::string where;
  return where;
}

/// Reports to $DDPRUN_PROGRESS_FILE when the launcher set it; nowhere otherwise.
ProgressSink progressFileSink() {
  auto path = getEnv(kProgressFileEnv);
  if (!path) return {};
  auto writer = std::make_shared<ProgressFileWriter>(*path);
  return [writer](const ProgressRecord& record) { writer->report(record); };
}

/// The data set the options name (decoded in a forkserver template once for every rank it forks).
Dataset loadOptionsDataset(const WorkerOptions& options) {
  const DatasetKind kind = parseDatasetKind(options.dataset);
  return loadDataset(kind, options.dataDir.empty() ? defaultDataDir(kind) : options.dataDir);
}

/// `comm` is owned by the caller so that the peers' connections stay open until a failure has been
/// recorded: the first error file written must be the root cause's, not a peer's "connection closed".
/// `preloaded` is the template's decoded data under the forkserver; empty otherwise.
int runWorker(const WorkerOptions& options, std::optional<Dataset> preloaded, std::unique_ptr<Communicator>& comm) {
  const DistEnv env = DistEnv::fromEnvironment();
  checkFlagsAgainstEnvironment(options, env);
  // Placement first: a CUDA or NCCL request this build or machine cannot meet fails before the data loads.
  const Placement placement = placeRank(env, parseBackendKind(options.backend), parseDeviceKind(options.device));
  activateDevice(placement);
  if (options.cudaGraph == "on" && !placement.cuda) {
    throw FlagError("--cuda-graph on: this rank trains on the CPU; CUDA graphs need a CUDA device (--device cuda)");
  }
  failureContext() = "rank " + std::to_string(env.rank) + " on " + placement.deviceName();
  if (placement.sharedGpu) {
    spdlog::info("LOCAL_RANK {} shares {} with other ranks (more local ranks than GPUs; Gloo)", env.localRank,
                 placement.deviceName());
  }
  configureThreads(options);
  torch::manual_seed(static_cast<uint64_t>(options.seed));
  Dataset data = preloaded ? std::move(*preloaded) : loadOptionsDataset(options);
  if (env.rank == 0) spdlog::info("data: {} ({})", data.description, options.dataset);

  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(options.timeoutSeconds * 1000));
  comm = makeCommunicator(env, placement, timeout);
  // ddprun --restart-scope rank: the group can be replaced under the trainer (rank_replacement.hpp). Only with
  // ddprun's agent store: without it rank 0's process holds the store and cannot be replaced.
  std::unique_ptr<GroupReplacer> replacer;
  ReplaceableCommunicator* replaceable = nullptr;
  if (env.replaceableRanks && env.useAgentStore && comm->formsGroup()) {
    auto wrapped = std::make_unique<ReplaceableCommunicator>(std::move(comm), timeout);
    replaceable = wrapped.get();
    comm = std::move(wrapped);
    replacer = makeStoreGroupReplacer(env, placement, timeout);
    // Every rank is in generation 0 now: from here a failed rank can be replaced (before, ddprun restarts the group).
    if (env.rank == 0 && env.commGeneration == 0) replacer->markFormed();
  }
  if (env.rank == 0) {
    spdlog::info(
        "world size {}, backend {}, device {}, model {}, batch {} per rank, {} intra-op threads, {}, "
        "attempt {}",
        comm->worldSize(), comm->backendName(), comm->device().str(), options.model, options.batchSize,
        torch::get_num_threads(), options.amp ? "amp bf16 autocast" : "float32", env.restartCount);
  }
  Trainer trainer(options, env, *comm, std::move(data), makeModel(options.model), progressFileSink());
  if (replaceable != nullptr) trainer.enableRankReplacement(*replaceable, *replacer);
  TrainResult result = trainer.run();
  if (env.rank == 0) {
    if (result.lastEvaluation.samples > 0) {
      spdlog::info("finished: global step {}, test accuracy {:.2f}% (epoch {})", result.progress.globalStep,
                   result.lastEvaluation.accuracy * 100, result.lastEvaluation.epoch);
    } else if (result.progress.epoch >= options.epochs) {
      spdlog::info("nothing to do: the checkpoint is already at the end of epoch {}", options.epochs);
    } else {
      spdlog::info("stopped at --max-steps {} (epoch {}, step {} of it); the next run resumes there", options.maxSteps,
                   result.progress.epoch + 1, result.progress.stepInEpoch);
    }
  }
  comm->barrier();  // nobody exits while a peer may still need it for the last collective
  return 0;
}

std::string typeName(const std::exception& e) {
  if (dynamic_cast<const InjectedFault*>(&e)) return "InjectedFault";
  if (dynamic_cast<const TrainingDiverged*>(&e)) return "TrainingDiverged";
  if (dynamic_cast<const ConfigError*>(&e)) return "ConfigError";
  if (dynamic_cast<const DataError*>(&e)) return "DataError";
  if (dynamic_cast<const IoError*>(&e)) return "IoError";
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e)) return "c10::OutOfMemoryError";
  if (dynamic_cast<const c10::Error*>(&e)) return "c10::Error";
  return "RuntimeError";
}

void recordFailure(const std::exception& e) {
  // c10 errors carry a long C++ backtrace after the first line; the log keeps one line, the error file all.
  const std::string what = e.what();
  const FailureReport report = describeFailure(typeName(e), what, failureContext());
  spdlog::error("{}: {}", report.type, report.headline);
  auto errorFile = getEnv("TORCHELASTIC_ERROR_FILE");
  if (!errorFile) return;
  try {
    writeErrorFile(*errorFile, {report.type + ": " + report.headline, "C++ worker (no Python stack):\n" + what,
                                static_cast<int64_t>(std::time(nullptr))});
  } catch (const std::exception& writeError) {
    spdlog::error("could not write the error file: {}", writeError.what());
  }
}

/// Ends the process without static destructors. LibTorch's deregister its thousands of operators one by one,
/// which took 100-300 ms on a 2-core machine: time a failed rank's peers wait in the exit and ddprun's restart
/// waits for. By now everything that must reach a file is written (the trainer, with its checkpoints, metrics and
/// progress file, is gone; the error file is written); the logs and the C streams are flushed here. The
/// communicator's sockets and shared memory go with the process.
[[noreturn]] void exitNow(int code) {
  spdlog::default_logger()->flush();
  std::fflush(nullptr);
  std::_Exit(code);
}

/// NCCL's watchdog thread reports an asynchronous error (a dead peer, a CUDA fault in a collective) by
/// throwing on its own thread, which ends in std::terminate; record it like any other failure first, so
/// the launcher's summary names the cause instead of a bare SIGABRT.
[[noreturn]] void onTerminate() {
  static std::atomic<bool> recorded{false};
  if (auto current = std::current_exception(); current && !recorded.exchange(true)) {
    try {
      std::rethrow_exception(current);
    } catch (const std::exception& e) {
      recordFailure(e);
    } catch (...) {
    }
    spdlog::default_logger()->flush();
  }
  std::abort();
}

}  // namespace

/// Under `ddprun --start-method forkserver`: decodes the data set once, single-threaded, and serves ddprun's
/// fork requests (common/forkserver.hpp); returns in each forked rank with the decoded data. Elsewhere: nothing.
std::optional<Dataset> serveForksIfAsked(const WorkerOptions& options) {
  if (!forkServerAsked()) return std::nullopt;
  configureLogging("forkserver");
  // One intra-op thread while decoding: a thread pool started before fork() would be broken in every rank.
  torch::set_num_threads(1);
  std::optional<Dataset> data;
  try {
    data = loadOptionsDataset(options);
  } catch (const std::exception& e) {
    spdlog::warn("template: the data did not load ({}); each rank loads it itself", e.what());
  }
  runForkServerIfAsked();
  return data;
}

/// In a spare rank (ddprun --restart-scope rank with the forkserver; common/spare_rank.hpp): warms up, then waits
/// until ddprun claims it as a rank and returns as that rank. Elsewhere: nothing.
void becomeRankWhenClaimed(const WorkerOptions& options, const std::optional<Dataset>& data) {
  if (!isSpareRank()) return;
  configureLogging("spare");
  configureThreads(options);
  if (data) {
    try {
      warmUpSpareRank(options, *data);
    } catch (const std::exception& e) {
      spdlog::warn("spare rank: the warm-up step failed ({}); waiting to be claimed all the same", e.what());
    }
  }
  awaitSpareClaim();
}

int main(int argc, char** argv) {
  auto parsed = parseWorkerOptions(argc, argv);
  if (!parsed.proceed) return parsed.exitCode;
  noteWarningSignals();
  std::optional<Dataset> preloaded = serveForksIfAsked(parsed.options);
  becomeRankWhenClaimed(parsed.options, preloaded);
  configureLogging(getEnv("RANK").value_or("0"));
  std::set_terminate(onTerminate);
  std::unique_ptr<Communicator> comm;
  int code = 0;
  try {
    code = runWorker(parsed.options, std::move(preloaded), comm);
  } catch (const std::exception& e) {
    recordFailure(e);
    code = dynamic_cast<const FlagError*>(&e) != nullptr ? 2 : 1;  // a flag that cannot work: a usage error
  }
  exitNow(code);
}
