#include "launcher/output_drain.hpp"

#include <spdlog/spdlog.h>

#include <fstream>

#include "launcher/process/console_writer.hpp"

namespace ddprun::launcher {
namespace {

uint64_t consoleProgress() {
  uint64_t moved = consoleOut().written() + consoleOut().queued();
  if (&consoleErr() != &consoleOut()) moved += consoleErr().written() + consoleErr().queued();
  return moved;
}

}  // namespace

bool drainWorkerOutput(boost::asio::io_context& io, const WorkerGroup& group, std::chrono::milliseconds idle,
                       const bool* signalled, std::chrono::milliseconds afterSignal) {
  io.restart();
  auto lastMove = std::chrono::steady_clock::now();
  uint64_t seen = consoleProgress();
  const auto consoleEmpty = [] {
    return consoleOut().queued() == 0 && (&consoleErr() == &consoleOut() || consoleErr().queued() == 0);
  };
  // The relays end at end of stream; one that waits for the console has a timer pending, so the loop has work.
  while (!group.outputEnded() || !consoleEmpty()) {
    io.run_one_for(std::chrono::milliseconds(20));
    const uint64_t now = consoleProgress();
    if (now != seen) {
      seen = now;
      lastMove = std::chrono::steady_clock::now();
      continue;
    }
    const bool waitsForReader = !consoleEmpty() || group.outputWaitsForConsole();
    const auto still = std::chrono::steady_clock::now() - lastMove;
    if (*signalled ? still > afterSignal : !waitsForReader && still > idle) return false;
  }
  return true;
}

std::string saveUnshownOutput(WorkerGroup& group, const std::string& runDir) {
  std::string text = consoleOut().takeUnwritten();
  if (&consoleErr() != &consoleOut()) text += consoleErr().takeUnwritten();
  text += group.takeUnshownOutput();
  if (text.empty()) return "";
  const std::string path = runDir + "/" + kUnshownOutputFile;
  std::ofstream out(path, std::ios::binary | std::ios::app);
  out << text;
  out.close();
  if (!out) {
    spdlog::warn("cannot save the {} bytes of output the console did not take into {}", text.size(), path);
    return "";
  }
  spdlog::warn("the console did not take {} bytes of output: they are in {}", text.size(), path);
  return path;
}

}  // namespace ddprun::launcher
