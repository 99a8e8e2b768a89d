#include "launcher/watch/evidence/stack_collector.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

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

/// One stack tool's job: a process of a target, and where its output goes.
struct Job {
  size_t target = 0;
  pid_t pid = -1;
  std::string file;  ///< the target's file for the rank itself, a temporary one beside it for a child
};

struct StackCollector::Run {
  explicit Run(boost::asio::io_context& io) : timer(io) {}
  std::vector<Target> targets;
  std::vector<Job> jobs;
  std::vector<pid_t> tools;  ///< by job; -1: not running
  size_t pending = 0;
  Done done;
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

void StackCollector::collect(std::vector<Target> targets, std::chrono::milliseconds budget, Done done) {
  auto run = std::make_shared<Run>(io_);
  run->targets = std::move(targets);
  run->done = std::move(done);
  for (size_t t = 0; t < run->targets.size(); ++t) {
    const auto& target = run->targets[t];
    run->jobs.push_back({t, target.pid, target.file});
    for (pid_t child : target.children) {
      run->jobs.push_back({t, child, target.file + ".child-" + std::to_string(child)});
    }
  }
  run->tools.assign(run->jobs.size(), -1);
  current_ = run;
  bool missingTool = false;
  for (size_t i = 0; i < run->jobs.size(); ++i) {
    const Job& job = run->jobs[i];
    const auto command = stackCommand(job.pid);
    if (command.empty()) {
      missingTool = true;
      continue;
    }
    const int out = ::open(job.file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0) {
      spdlog::warn("cannot write {}: {}", job.file, std::strerror(errno));
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
      spdlog::warn("cannot save the stacks of pid {}: {}", job.pid, e.what());
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
  // Each child's stacks after its rank's, under a line that names it.
  for (const Job& job : run->jobs) {
    const auto& target = run->targets[job.target];
    if (job.pid == target.pid) continue;
    const std::string text = readCapped(job.file);
    std::remove(job.file.c_str());
    std::ofstream out(target.file, std::ios::app);
    out << "\n--- process " << job.pid << ", started by the rank (pid " << target.pid
        << ", e.g. a DataLoader worker) ---\n"
        << text;
  }
  std::vector<Saved> results;
  for (const auto& target : run->targets) {
    std::error_code ec;
    if (std::filesystem::file_size(target.file, ec) > kMaxStackFileBytes) {
      std::filesystem::resize_file(target.file, kMaxStackFileBytes, ec);
    }
    results.push_back({target.localRank, target.file});
  }
  if (current_ == run) current_.reset();
  run->done(std::move(results));
}

}  // namespace ddprun::launcher
