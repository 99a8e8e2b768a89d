#include "support/pty_session.hpp"

#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace ddprun::test {

PtySession::PtySession(const std::string& program, const std::vector<std::string>& args,
                       const std::map<std::string, std::string>& env) {
  std::vector<std::string> argvText{program};
  argvText.insert(argvText.end(), args.begin(), args.end());
  std::map<std::string, std::string> merged;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq != nullptr) merged[std::string(*e, static_cast<size_t>(eq - *e))] = eq + 1;
  }
  for (const auto& [key, value] : env) merged[key] = value;
  merged["TERM"] = "xterm";
  std::vector<std::string> envText;
  for (const auto& [key, value] : merged) envText.push_back(key + "=" + value);
  std::vector<char*> argv, envp;
  for (auto& a : argvText) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : envText) envp.push_back(e.data());
  envp.push_back(nullptr);
  winsize size{};
  size.ws_row = 40;
  size.ws_col = 132;
  pid_ = ::forkpty(&master_, nullptr, nullptr, &size);
  if (pid_ < 0) throw std::runtime_error(std::string("forkpty: ") + std::strerror(errno));
  if (pid_ == 0) {
    ::execve(program.c_str(), argv.data(), envp.data());
    ::_exit(127);
  }
}

PtySession::~PtySession() {
  if (!reaped_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  if (master_ >= 0) ::close(master_);
}

void PtySession::readAvailable(std::chrono::milliseconds wait) {
  pollfd fd{master_, POLLIN, 0};
  if (::poll(&fd, 1, static_cast<int>(wait.count())) <= 0) return;
  char buffer[65536];
  const ssize_t n = ::read(master_, buffer, sizeof buffer);
  if (n > 0) output_.append(buffer, static_cast<size_t>(n));
}

bool PtySession::waitFor(const std::string& text, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (output_.find(text) == std::string::npos) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    readAvailable(std::chrono::milliseconds(20));
  }
  return true;
}

void PtySession::send(const std::string& input) {
  [[maybe_unused]] ssize_t n = ::write(master_, input.data(), input.size());
}

ChildResult PtySession::wait(std::chrono::milliseconds timeout) {
  ChildResult result;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (::waitpid(pid_, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      result.timedOut = true;
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      break;
    }
    readAvailable(std::chrono::milliseconds(20));
  }
  reaped_ = true;
  for (int i = 0; i < 10; ++i) readAvailable(std::chrono::milliseconds(5));  // what is left in the terminal
  if (WIFEXITED(status)) result.exitCode = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  result.output = output_;
  return result;
}

char processState(pid_t pid) {
  const auto fields = procStatFields(readFile("/proc/" + std::to_string(pid) + "/stat"));
  return fields.empty() ? '?' : fields[0][0];
}

bool PtySession::cookedMode() const {
  termios mode{};
  return ::tcgetattr(master_, &mode) == 0 && (mode.c_lflag & ICANON) != 0 && (mode.c_lflag & ECHO) != 0;
}

}  // namespace ddprun::test
