#include "worker/options.hpp"

#include <CLI/CLI.hpp>
#include <cmath>
#include <iostream>
#include <map>
#include <sstream>

#include "worker/comm/backends.hpp"

namespace ddprun::worker {

namespace {

/// A number check with a plain message (CLI11's ranges print 309-digit bounds and let NaN through).
CLI::Validator between(double low, double high, bool lowInclusive = true) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double value = 0;
        try {
          size_t used = 0;
          value = std::stod(text, &used);
          if (used != text.size()) return "'" + text + "' is not a number";
        } catch (const std::exception&) {
          return "'" + text + "' is not a number";
        }
        const bool aboveLow = lowInclusive ? value >= low : value > low;
        if (!std::isfinite(value) || !aboveLow || value > high) {
          std::ostringstream range;
          range << (lowInclusive ? "[" : "(") << low << ", " << high << "]";
          return "'" + text + "' is outside " + range.str();
        }
        return "";
      },
      "", "between");
}

}  // namespace

ParseResult parseWorkerOptions(int argc, char** argv) {
  ParseResult result;
  WorkerOptions& o = result.options;
  CLI::App app{"worker: LibTorch DDP training of MNIST-format data (run it under ddprun or torchrun)"};
  app.option_defaults()->always_capture_default();
  app.add_option("--dataset", o.dataset, "mnist or fashion-mnist")->check(CLI::IsMember({"mnist", "fashion-mnist"}));
  app.add_option("--data-dir", o.dataDir,
                 "IDX files (gzip or raw); default $DDPRUN_DATA_DIR, else data/mnist, else the installed sample "
                 "(<prefix>/share/ddprun/data/mnist); /usr/share/datasets/fashion-mnist for fashion-mnist");
  app.add_option("--model", o.model, "mlp (784-256-10) or cnn")->check(CLI::IsMember({"mlp", "cnn"}));
  app.add_option("--epochs", o.epochs)->check(between(1, 1e6));
  app.add_option("--batch-size", o.batchSize, "per rank")->check(between(1, 1e7));
  app.add_option("--lr", o.lr, "SGD learning rate")->check(between(0, 1e6, false));
  app.add_option("--momentum", o.momentum)->check(between(0, 1));
  app.add_option("--weight-decay", o.weightDecay)->check(between(0, 1e6));
  app.add_option("--seed", o.seed, "model init and DistributedSampler seed")->check(between(0, 4e18));
  app.add_flag("--drop-last", o.dropLast, "drop the tail instead of padding (DistributedSampler drop_last)");
  app.add_option("--bucket-cap-mb", o.bucketCapMb, "gradient bucket size in MiB")->check(between(0, 1e5, false));
  app.add_flag("--no-overlap", o.noOverlap, "start the allreduce after backward instead of during it");
  app.add_option("--backend", o.backend, backendHelp() + ". Naming one forms a process group even for 1 rank")
      ->check(CLI::IsMember(backendNames()));
  app.add_option("--device", o.device, "auto (cuda:LOCAL_RANK when built with CUDA and a GPU is visible), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_flag("--amp", o.amp, "bf16 autocast (forward and loss) on the training device; weights stay float32");
  app.add_option("--cuda-graph", o.cudaGraph,
                 "record the training step as CUDA graphs once and replay it: auto (on with a CUDA device), on, off")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  app.add_option("--timeout", o.timeoutSeconds, "store and collective timeout in seconds")->check(between(1, 1e6));
  app.add_option("--log-every", o.logEvery, "steps between progress lines")->check(between(1, 1e12));
  app.add_option("--metrics-file", o.metricsFile, "append JSON lines of metrics here (rank 0)");
  app.add_option("--checkpoint-dir", o.checkpointDir, "write checkpoints here and resume from the newest");
  app.add_option("--checkpoint-every", o.checkpointEvery, "steps between checkpoints (0: epoch ends only)")
      ->check(between(0, 1e12));
  app.add_option("--max-steps", o.maxSteps, "stop after this many optimizer steps (0: no limit)")
      ->check(between(0, 1e12));
  app.add_option("--threads", o.threads, "intra-op threads (0: OMP_NUM_THREADS or LibTorch's default)")
      ->check(between(0, 1024));
  app.add_option("--fail-at-step", o.failAtStep, "fault injection: fail before this global step (-1: never)")
      ->check(between(-1, 1e12));
  app.add_option("--fail-rank", o.failRank, "fault injection: the rank that fails (< WORLD_SIZE)")
      ->check(between(0, 1e6));
  app.add_option("--fail-attempt", o.failAttempt, "fault injection: only when TORCHELASTIC_RESTART_COUNT is this")
      ->check(between(0, 1e6));
  std::string failMode = "exit";
  app.add_option("--fail-mode", failMode,
                 "exit (error + error file), kill (SIGKILL), hang, stop (SIGSTOP, as a debugger or a frozen host holds "
                 "it), or thread (an exception on a background "
                 "thread, as NCCL's watchdog reports errors: error file, then SIGABRT)")
      ->check(CLI::IsMember({"exit", "kill", "hang", "stop", "thread"}));
  app.add_option("--slow-rank", o.slowRank, "straggler injection: this rank sleeps --slow-step-ms per step (-1: none)")
      ->check(between(-1, 1e6));
  app.add_option("--slow-step-ms", o.slowStepMs, "straggler injection: milliseconds the --slow-rank sleeps per step")
      ->check(between(0, 1e7));
  try {
    app.parse(argc, argv);
    o.failMode = failMode == "kill"     ? FailMode::kKill
                 : failMode == "hang"   ? FailMode::kHang
                 : failMode == "stop"   ? FailMode::kStop
                 : failMode == "thread" ? FailMode::kThread
                                        : FailMode::kExit;
  } catch (const CLI::CallForHelp& e) {
    result.proceed = false;
    result.exitCode = app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "worker: " << e.what() << " (see --help)\n";
    result.proceed = false;
    result.exitCode = 2;
  }
  return result;
}

}  // namespace ddprun::worker
