#include "launcher/config/python_entry.hpp"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "common/env.hpp"
#include "common/error.hpp"
#include "launcher/process/process_spawn.hpp"

namespace ddprun::launcher {
namespace {

bool endsWith(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// The file exec or Python would open for `program`: PATH first (as exec), then the working directory
/// (as `python program`). Empty when neither has it.
std::string locate(const std::string& program) {
  std::string path = resolveProgram(program);
  if (!path.empty() && ::access(path.c_str(), F_OK) == 0) return path;
  if (::access(program.c_str(), F_OK) == 0) return program;
  return "";
}

}  // namespace

ProgramKind programKind(const std::string& program, bool module, bool runPath, bool noPython) {
  if (noPython) return ProgramKind::kDirect;
  if (module || runPath || endsWith(program, ".py")) return ProgramKind::kPython;
  const std::string path = locate(program);
  if (path.empty()) return ProgramKind::kDirect;  // exec will say it is missing
  char head[4] = {0, 0, 0, 0};
  std::ifstream in(path, std::ios::binary);
  in.read(head, sizeof head);
  const bool elf = in.gcount() == 4 && head[0] == 0x7f && head[1] == 'E' && head[2] == 'L' && head[3] == 'F';
  const bool shebang = in.gcount() >= 2 && head[0] == '#' && head[1] == '!';
  return elf || shebang ? ProgramKind::kDirect : ProgramKind::kPython;
}

PythonChoice choosePython() {
  if (auto exec = getEnv("PYTHON_EXEC")) return {*exec, "PYTHON_EXEC"};
  if (auto python = getEnv("DDPRUN_PYTHON")) return {*python, "DDPRUN_PYTHON"};
  return {"python3", "PATH"};
}

std::optional<std::string> torchProblem(const PythonChoice& python) {
  const std::string path = resolveProgram(python.interpreter);
  if (path.empty() || ::access(path.c_str(), X_OK) != 0) {
    throw ConfigError("Python interpreter '" + python.interpreter + "' (from " + python.source +
                      ") not found; set PYTHON_EXEC to a python that has torch");
  }
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0 || !S_ISREG(info.st_mode)) {
    // A directory is "executable" to access(2); spawning it failed with a misleading EACCES.
    throw ConfigError("Python interpreter '" + python.interpreter + "' (from " + python.source +
                      ") is not a program file (a directory?); set PYTHON_EXEC to a python that has torch");
  }
  SpawnSpec spec;
  spec.argv = {path, "-c", "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('torch') else 3)"};
  spec.allowParentToTrace = false;
  const pid_t pid = spawnProcess(spec);
  // An interpreter that hangs at start must not hang ddprun: give it 10 s.
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return "could not check whether " + path + " has torch (it did not answer within 10 s)";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const ExitStatus exit = decodeWaitStatus(status);
  if (exit.signal == 0 && exit.exitCode == 0) return std::nullopt;
  const std::string why = exit.exitCode == 3 ? "cannot find the torch module" : "failed to start";
  return "Python " + path + " (from " + python.source + ") " + why +
         "; the workers will fail to import it: set PYTHON_EXEC (or DDPRUN_PYTHON) to an interpreter with torch, "
         "e.g. PYTHON_EXEC=/usr/bin/python3 for Debian's python3-torch";
}

}  // namespace ddprun::launcher
