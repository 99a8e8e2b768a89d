#include "launcher/worker_process.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/process/extend.hpp>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "common/error.hpp"

namespace ddprun::launcher {
namespace bp = boost::process;
namespace asio = boost::asio;

namespace {

/// Runs in the child between fork and exec: its own process group (so signals reach its children
/// too), and death with the parent (so kill -9 of ddprun leaves no orphan).
struct WorkerSetup : bp::extend::handler {
  pid_t parent;
  template <class Executor>
  void on_exec_setup(Executor&) const {
    ::setpgid(0, 0);
    ::signal(SIGPIPE, SIG_DFL);  // ddprun ignores SIGPIPE; an ignored signal would survive exec
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);  // the parent died before prctl took effect
  }
};

/// Writes whole lines so ranks never interleave within a line.
void writeLine(FILE* console, const std::string& prefix, const std::string& line) {
  std::string out = prefix + line;
  if (out.empty() || out.back() != '\n') out.push_back('\n');
  std::fwrite(out.data(), 1, out.size(), console);
  std::fflush(console);
}

}  // namespace

struct WorkerProcess::Stream {
  explicit Stream(asio::io_context& io) : pipe(io) {}
  bp::async_pipe pipe;
  asio::streambuf buffer;
  FILE* console = nullptr;  // null: not shown
  std::ofstream file;       // not open: no file
  std::string prefix;

  void emit(const std::string& line) {
    if (file.is_open()) {
      file << line;
      if (line.empty() || line.back() != '\n') file << '\n';
      file.flush();
    }
    if (console != nullptr) writeLine(console, prefix, line);
  }
};

std::string signalName(int signal) {
  const char* abbrev = sigabbrev_np(signal);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(signal);
}

WorkerProcess::WorkerProcess(asio::io_context& io, const std::vector<std::string>& command,
                             const std::map<std::string, std::string>& env, const OutputSpec& output,
                             ExitCallback onExit) {
  boost::filesystem::path program = command.at(0);
  if (command[0].find('/') == std::string::npos) program = bp::search_path(command[0]);
  if (program.empty() || ::access(program.c_str(), X_OK) != 0) {
    throw Error("cannot start worker: '" + command[0] + "' is not an executable program (or not on PATH)");
  }
  bp::environment childEnv = boost::this_process::environment();
  for (const auto& [key, value] : env) childEnv[key] = value;
  std::vector<std::string> args(command.begin() + 1, command.end());

  auto makeStream = [&](bool toConsole, const std::string& file, FILE* console) -> std::shared_ptr<Stream> {
    if (!toConsole && file.empty()) return nullptr;
    auto stream = std::make_shared<Stream>(io);
    stream->prefix = output.prefix;
    if (toConsole) stream->console = console;
    if (!file.empty()) {
      stream->file.open(file, std::ios::trunc);
      if (!stream->file) throw Error("cannot create worker log file " + file);
    }
    return stream;
  };
  out_ = makeStream(output.stdoutToConsole, output.stdoutFile, stdout);
  err_ = makeStream(output.stderrToConsole, output.stderrFile, stderr);

  // Boost.Process may run this inline, inside the child constructor below, when the child has already
  // exited; posting keeps the callback out of a half-built WorkerProcess (and out of the caller's loop).
  auto exitHandler = [this, &io, alive = std::weak_ptr<bool>(alive_), onExit](int, const std::error_code&) {
    const auto when = std::chrono::system_clock::now();
    asio::post(io, [this, alive, onExit, when] {
      if (!alive.lock()) return;
      exited_ = true;
      WorkerExit result;
      result.when = when;
      const int status = child_->native_exit_code();
      if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
      if (WIFEXITED(status)) result.exitCode = WEXITSTATUS(status);
      onExit(result);
    });
  };
  WorkerSetup setup;
  setup.parent = ::getpid();
  try {
    if (out_ && err_) {
      child_ = std::make_unique<bp::child>(program, bp::args(args), childEnv, bp::std_in < bp::null,
                                           bp::std_out > out_->pipe, bp::std_err > err_->pipe, io,
                                           bp::on_exit = exitHandler, setup);
    } else if (out_) {
      child_ = std::make_unique<bp::child>(program, bp::args(args), childEnv, bp::std_in < bp::null,
                                           bp::std_out > out_->pipe, bp::std_err > bp::null, io,
                                           bp::on_exit = exitHandler, setup);
    } else if (err_) {
      child_ = std::make_unique<bp::child>(program, bp::args(args), childEnv, bp::std_in < bp::null,
                                           bp::std_out > bp::null, bp::std_err > err_->pipe, io,
                                           bp::on_exit = exitHandler, setup);
    } else {
      child_ = std::make_unique<bp::child>(program, bp::args(args), childEnv, bp::std_in < bp::null,
                                           bp::std_out > bp::null, bp::std_err > bp::null, io,
                                           bp::on_exit = exitHandler, setup);
    }
  } catch (const std::exception& e) {
    throw Error("cannot start worker '" + command[0] + "': " + e.what());
  }
  pid_ = child_->id();
  if (out_) pump(out_);
  if (err_) pump(err_);
}

WorkerProcess::~WorkerProcess() {
  *alive_ = false;
  alive_.reset();
  if (!exited_ && pid_ > 0) ::kill(-pid_, SIGKILL);
  if (child_) {
    std::error_code ec;
    child_->detach();
  }
}

void WorkerProcess::pump(std::shared_ptr<Stream> stream) {
  asio::async_read_until(stream->pipe, stream->buffer, '\n',
                         [this, stream, alive = std::weak_ptr<bool>(alive_)](const boost::system::error_code& ec,
                                                                             size_t n) {
                           if (n > 0) {
                             std::string line(asio::buffers_begin(stream->buffer.data()),
                                              asio::buffers_begin(stream->buffer.data()) + n);
                             stream->buffer.consume(n);
                             stream->emit(line);
                           }
                           if (ec) {
                             // EOF: flush a last line that had no newline.
                             if (stream->buffer.size() > 0) {
                               std::string rest(asio::buffers_begin(stream->buffer.data()),
                                                asio::buffers_end(stream->buffer.data()));
                               stream->buffer.consume(stream->buffer.size());
                               stream->emit(rest);
                             }
                             return;
                           }
                           if (alive.lock()) pump(stream);
                         });
}

void WorkerProcess::signalGroup(int signal) {
  if (pid_ <= 0) return;
  // The group id stays reserved while any member lives, so this cannot hit an unrelated group.
  if (::kill(-pid_, signal) != 0 && !exited_) ::kill(pid_, signal);
}

bool WorkerProcess::groupAlive() const { return pid_ > 0 && ::kill(-pid_, 0) == 0; }

}  // namespace ddprun::launcher
