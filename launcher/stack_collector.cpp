#include "launcher/stack_collector.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

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

bool inRuntime(const std::string& frame) {
  for (const char* lib : {"/libc.so", "/libpthread", "/ld-linux", "/libstdc++", "/libgcc_s"}) {
    if (frame.find(lib) != std::string::npos) return true;
  }
  return false;
}

/// "#3  0x00007f… name(args) - /path/lib.so" -> "name(args) (lib.so)".
std::string describeFrame(const std::string& line) {
  std::string text = line;
  const auto address = text.find("0x");
  if (address != std::string::npos) {
    const auto space = text.find(' ', address);
    text = space == std::string::npos ? "" : text.substr(space + 1);
  }
  if (text.rfind("- ", 0) == 0) text = " " + text;  // a frame without a name: only " - module"
  const auto dash = text.rfind(" - ");
  std::string module;
  if (dash != std::string::npos) {
    module = std::filesystem::path(text.substr(dash + 3)).filename().string();
    text = text.substr(0, dash);
  }
  while (!text.empty() && text.front() == ' ') text.erase(text.begin());
  if (text.empty()) text = "??";
  return module.empty() ? text : text + " (" + module + ")";
}

std::string readCapped(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string text(kMaxStackFileBytes, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  return text;
}

}  // namespace

std::string innermostNativeFrame(const std::string& stacks, pid_t pid) {
  std::istringstream lines(stacks);
  std::string line;
  bool mainThread = false;
  const std::string euThread = "TID " + std::to_string(pid) + ":";
  while (std::getline(lines, line)) {
    if (line.rfind("TID ", 0) == 0) {
      mainThread = line == euThread;
      continue;
    }
    // gdb: "Thread 1 (Thread 0x… (LWP 1234) …):"
    if (line.rfind("Thread ", 0) == 0) {
      mainThread = line.find("(LWP " + std::to_string(pid) + ")") != std::string::npos;
      continue;
    }
    if (!mainThread || line.rfind("#", 0) != 0 || inRuntime(line)) continue;
    const std::string frame = describeFrame(line);
    if (frame.rfind("??", 0) != 0) return frame;  // frames without a name tell nothing
  }
  return "";
}

bool waitsInCollective(const std::string& nativeFrame, const std::string& pythonFrame) {
  for (const char* mark : {"c10d::", "gloo::", "nccl", "ProcessGroup", "ddprun::worker::CollectiveQueue",
                           "ddprun::worker::ShmGroup", "PendingCollective::wait"}) {
    if (nativeFrame.find(mark) != std::string::npos) return true;
  }
  return pythonFrame.find("torch/distributed/") != std::string::npos;
}

std::string innermostPythonFrame(const std::string& stacks) {
  auto start = stacks.find("Current thread ");
  if (start == std::string::npos) start = stacks.find("Thread 0x");
  if (start == std::string::npos) return "";
  const auto file = stacks.find("  File \"", start);
  if (file == std::string::npos) return "";
  const auto end = stacks.find('\n', file);
  return stacks.substr(file + 2, end == std::string::npos ? std::string::npos : end - file - 2);
}

struct StackCollector::Run {
  explicit Run(boost::asio::io_context& io) : timer(io) {}
  std::vector<Target> targets;
  std::vector<pid_t> tools;  ///< -1: not running
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
  run->tools.assign(run->targets.size(), -1);
  current_ = run;
  bool missingTool = false;
  for (size_t i = 0; i < run->targets.size(); ++i) {
    const Target& target = run->targets[i];
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
  std::vector<Result> results;
  for (const Target& target : run->targets) {
    std::error_code ec;
    if (std::filesystem::file_size(target.file, ec) > kMaxStackFileBytes) {
      std::filesystem::resize_file(target.file, kMaxStackFileBytes, ec);
    }
    results.push_back({target.localRank, target.file, innermostNativeFrame(readCapped(target.file), target.pid)});
  }
  if (current_ == run) current_.reset();
  run->done(std::move(results));
}

}  // namespace ddprun::launcher
