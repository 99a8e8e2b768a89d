#include "launcher/watch/stack_collector.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "common/untrusted_file.hpp"

namespace ddprun::launcher {
namespace {

/// The tool's command for `pid`, or empty when neither is installed.
std::vector<std::string> stackCommand(pid_t pid) {
  if (!resolveProgram("eu-stack").empty()) return {"eu-stack", "-m", "-p", std::to_string(pid)};
  if (!resolveProgram("gdb").empty()) {
    return {"gdb", "-batch", "-nx", "-p", std::to_string(pid), "-ex", "thread apply all bt"};
  }
  return {};
}

std::string readCapped(const std::string& path) { return readUntrustedFile(path, kMaxStackFileBytes).value_or(""); }

}  // namespace

struct StackCollector::Run {
  explicit Run(boost::asio::io_context& io) : timer(io) {}
  std::vector<EvidenceSource::StackTarget> targets;
  std::vector<pid_t> tools;  ///< -1: not running
  size_t pending = 0;
  EvidenceSource::StacksDone done;
  boost::asio::steady_timer timer;
  bool finished = false;
};

StackCollector::StackCollector(boost::asio::io_context& io, ChildReaper& reaper) : io_(io), reaper_(reaper) {}

StackCollector::~StackCollector() {
  if (!current_) return;
  for (pid_t tool : current_->tools) {
    if (tool > 0) {
      reaper_.forget(tool);
      ::kill(-tool, SIGKILL);
    }
  }
}

void StackCollector::collect(std::vector<EvidenceSource::StackTarget> targets, std::chrono::milliseconds budget,
                             EvidenceSource::StacksDone done) {
  auto run = std::make_shared<Run>(io_);
  run->targets = std::move(targets);
  run->done = std::move(done);
  run->tools.assign(run->targets.size(), -1);
  current_ = run;
  bool missingTool = false;
  for (size_t i = 0; i < run->targets.size(); ++i) {
    const EvidenceSource::StackTarget& target = run->targets[i];
    const auto command = stackCommand(target.pid);
    if (command.empty()) {
      missingTool = true;
      continue;
    }
    const int out = ::open(target.file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0) {
      spdlog::warn("cannot write {}: {}", target.file, std::strerror(errno));
      continue;
    }
    SpawnSpec spec;
    spec.argv = command;
    spec.stdoutFd = out;
    spec.stderrFd = out;
    spec.allowParentToTrace = false;
    try {
      run->tools[i] = spawnProcess(spec);
    } catch (const std::exception& e) {
      spdlog::warn("cannot save the stacks of pid {}: {}", target.pid, e.what());
    }
    ::close(out);
    if (run->tools[i] < 0) continue;
    ++run->pending;
    reaper_.watch(run->tools[i], [this, run, i](ExitStatus) {
      run->tools[i] = -1;
      if (--run->pending == 0) finish(run);
    });
  }
  if (missingTool) spdlog::warn("no eu-stack or gdb on PATH: native stacks not saved (Debian: apt install elfutils)");
  if (run->pending == 0) {
    boost::asio::post(io_, [this, run] { finish(run); });
    return;
  }
  run->timer.expires_after(budget);
  run->timer.async_wait([this, run](const boost::system::error_code& ec) {
    if (ec || run->finished) return;
    for (pid_t tool : run->tools) {
      if (tool > 0) ::kill(-tool, SIGKILL);  // its exit (reaped) finishes the run
    }
  });
}

void StackCollector::finish(const std::shared_ptr<Run>& run) {
  if (run->finished) return;
  run->finished = true;
  run->timer.cancel();
  std::vector<EvidenceSource::Stacks> results;
  for (const auto& target : run->targets) {
    std::error_code ec;
    if (std::filesystem::file_size(target.file, ec) > kMaxStackFileBytes) {
      std::filesystem::resize_file(target.file, kMaxStackFileBytes, ec);
    }
    results.push_back({target.localRank, target.file, readCapped(target.file)});
  }
  if (current_ == run) current_.reset();
  run->done(std::move(results));
}

}  // namespace ddprun::launcher
