#include "support/child_process.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/process.hpp>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

#include "support/wait_until.hpp"

namespace ddprun::test {
namespace bp = boost::process;
namespace fs = std::filesystem;

struct ChildProcess::Impl {
  std::string outPath, errPath;
  bp::child child;
};

namespace {
std::string tempFile(const std::string& tag) {
  static std::mt19937_64 rng{std::random_device{}()};
  return (fs::temp_directory_path() / ("ddprun-test-" + tag + "-" + std::to_string(rng()))).string();
}
}  // namespace

ChildProcess::ChildProcess(const std::string& program, const std::vector<std::string>& args,
                           const std::map<std::string, std::string>& env)
    : impl_(new Impl) {
  auto environment = boost::this_process::environment();
  bp::environment childEnv = environment;
  for (const auto& [key, value] : env) childEnv[key] = value;
  impl_->outPath = tempFile("out");
  impl_->errPath = tempFile("err");
  impl_->child = bp::child(program, bp::args(args), childEnv, bp::std_out > impl_->outPath,
                           bp::std_err > impl_->errPath, bp::std_in < bp::null);
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept : impl_(other.impl_) { other.impl_ = nullptr; }

ChildProcess::~ChildProcess() {
  if (impl_ == nullptr) return;
  std::error_code ec;
  if (impl_->child.running(ec)) {
    impl_->child.terminate(ec);
    impl_->child.wait(ec);
  }
  fs::remove(impl_->outPath, ec);
  fs::remove(impl_->errPath, ec);
  delete impl_;
}

int ChildProcess::pid() const { return impl_->child.id(); }

bool ChildProcess::running() {
  std::error_code ec;
  return impl_->child.running(ec);
}

std::string ChildProcess::outputSoFar() const { return readFile(impl_->outPath) + readFile(impl_->errPath); }

void ChildProcess::sendSignal(int signal) { ::kill(impl_->child.id(), signal); }

ChildResult ChildProcess::wait(std::chrono::milliseconds timeout) {
  ChildResult result;
  std::error_code ec;
  // Polling, not child::wait_for: Boost 1.74's wait_for blocks for the whole timeout when SIGCHLD
  // arrived before the call.
  if (!waitUntil([&] { return !impl_->child.running(ec); }, timeout)) {
    result.timedOut = true;
    impl_->child.terminate(ec);
    impl_->child.wait(ec);
  }
  const int status = impl_->child.native_exit_code();
  if (WIFEXITED(status)) result.exitCode = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  result.output = readFile(impl_->outPath) + readFile(impl_->errPath);
  return result;
}

ChildResult runProcess(const std::string& program, const std::vector<std::string>& args,
                       const std::map<std::string, std::string>& env, std::chrono::milliseconds timeout) {
  ChildProcess child(program, args, env);
  return child.wait(timeout);
}

std::vector<ChildResult> runRanks(int nproc, const std::string& program, const std::vector<std::string>& args,
                                  const std::map<std::string, std::string>& extraEnv,
                                  std::chrono::milliseconds timeout) {
  const int port = freePort();
  std::vector<ChildProcess> children;
  for (int rank = 0; rank < nproc; ++rank) {
    std::map<std::string, std::string> env{{"RANK", std::to_string(rank)},
                                           {"LOCAL_RANK", std::to_string(rank)},
                                           {"WORLD_SIZE", std::to_string(nproc)},
                                           {"LOCAL_WORLD_SIZE", std::to_string(nproc)},
                                           {"MASTER_ADDR", "127.0.0.1"},
                                           {"MASTER_PORT", std::to_string(port)},
                                           {"OMP_NUM_THREADS", "1"},
                                           {"TORCHELASTIC_RESTART_COUNT", "0"}};
    for (const auto& [key, value] : extraEnv) env[key] = value;
    children.emplace_back(program, args, env);
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<ChildResult> results;
  for (auto& child : children) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    results.push_back(child.wait(std::max(left, std::chrono::milliseconds(1))));
  }
  return results;
}

int freePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) throw std::runtime_error("bind failed");
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::string makeTempDir(const std::string& tag) {
  std::string dir = tempFile(tag);
  fs::create_directories(dir);
  return dir;
}

std::string pythonExe() {
  const char* python = std::getenv("DDPRUN_PYTHON");
  return python != nullptr && *python != '\0' ? python : "/usr/bin/python3";
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> procStatFields(const std::string& stat) {
  std::vector<std::string> fields;
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return fields;
  std::istringstream rest(stat.substr(close + 1));
  std::string field;
  while (rest >> field) fields.push_back(field);
  return fields;
}

}  // namespace ddprun::test
