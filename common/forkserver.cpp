#include "common/forkserver.hpp"

#include "common/elf_section.hpp"
#include "common/fd_passing.hpp"
#include "common/handover.hpp"

#include <dirent.h>
#include <elf.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>
#include <vector>

// The marker: linking this file is what makes a program support the protocol.
__attribute__((section(".ddprun_forkserver"), used)) static const char kForkServerMarker[] = "ddprun forkserver v1";

namespace ddprun {
namespace {

/// Threads of this process (entries of /proc/self/task).
int threadCount() {
  int count = 0;
  if (DIR* tasks = ::opendir("/proc/self/task")) {
    while (const dirent* entry = ::readdir(tasks)) {
      if (entry->d_name[0] != '.') ++count;
    }
    ::closedir(tasks);
  }
  return count;
}

void sendText(int socket, const std::string& text) {
  [[maybe_unused]] ssize_t n = ::send(socket, text.data(), text.size(), MSG_NOSIGNAL);
}

/// One fork request: "fork", "session" or "group", then the environment; the rank's three streams.
struct Request {
  Handover message;
  bool session = false;
  std::vector<std::string> env;  ///< KEY=VALUE
};

/// Receives a request; false when ddprun closed the connection (or sent something else).
bool receive(int socket, Request& request) {
  if (!receiveHandover(socket, request.message)) return false;
  if (request.message.verb() != "fork" || request.message.lines.size() < 2) {
    request.message.closeFds();
    return false;
  }
  request.session = request.message.lines[1] == "session";
  request.env = request.message.environment(2);
  return true;
}

/// Signals the template ignores while it serves: Slurm's warnings (`scancel --signal=USR1`, `sbatch --signal`)
/// reach every process of a job step, and a template ended by one would leave later restarts without it. Each
/// rank gets back what the program had set before the template started serving.
constexpr int kIgnoredWhileServing[] = {SIGUSR1, SIGUSR2};
struct sigaction gProgramActions[std::size(kIgnoredWhileServing)];

void ignoreWarningsWhileServing() {
  for (size_t i = 0; i < std::size(kIgnoredWhileServing); ++i) {
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    ::sigemptyset(&ignore.sa_mask);
    ::sigaction(kIgnoredWhileServing[i], &ignore, &gProgramActions[i]);
  }
}

void restoreProgramsSignalActions() {
  for (size_t i = 0; i < std::size(kIgnoredWhileServing); ++i) {
    ::sigaction(kIgnoredWhileServing[i], &gProgramActions[i], nullptr);
  }
}

/// In the rank: becomes ddprun's child, then a worker with the streams and environment it was given.
void becomeRank(Request& request, int socket, pid_t ddprun, pid_t intermediate) {
  restoreProgramsSignalActions();
  // Until the intermediate child exits we are its child; then ddprun (a child subreaper) adopts us.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (::getppid() == intermediate) {
    if (std::chrono::steady_clock::now() > deadline) ::_exit(127);
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != ddprun) ::_exit(127);  // ddprun is gone, or is no subreaper
  if (request.session) {
    ::setsid();
  } else {
    ::setpgid(0, 0);
  }
  ::prctl(PR_SET_PTRACER, ddprun, 0, 0, 0);
  ::close(socket);
  applyHandover(request.message, request.env);
}

}  // namespace

bool forkServerAsked() {
  const char* value = std::getenv(kForkServerFdEnv);
  if (value == nullptr) return false;
  if (isSeqPacketSocket(std::atoi(value))) return true;
  // Inherited by accident: ddprun's template gets an open socket under this number. Run as a normal program.
  std::fprintf(stderr, "%s=%s does not name ddprun's fork socket; ignoring it\n", kForkServerFdEnv, value);
  ::unsetenv(kForkServerFdEnv);
  return false;
}

void runForkServerIfAsked() {
  if (!forkServerAsked()) return;  // a stray marker was said and dropped there
  (void)kForkServerMarker;
  const int socket = std::atoi(std::getenv(kForkServerFdEnv));
  ::unsetenv(kForkServerFdEnv);
  const pid_t ddprun = ::getppid();
  if (const int threads = threadCount(); threads != 1) {
    // A fork copies only the calling thread: a pool started before it would be broken in every rank.
    sendText(socket, "refuse " + std::to_string(threads) +
                         " threads run in the template; it can fork only "
                         "while single-threaded");
    ::_exit(0);
  }
  ignoreWarningsWhileServing();
  sendText(socket, "ready " + std::to_string(::getpid()));
  for (;;) {
    Request request;
    if (!receive(socket, request)) ::_exit(0);  // ddprun closed the connection: the job is over
    const pid_t intermediate = ::fork();
    if (intermediate == 0) {
      const pid_t self = ::getpid();
      const pid_t rank = ::fork();
      if (rank == 0) {
        becomeRank(request, socket, ddprun, self);
        return;
      }
      sendText(socket,
               rank > 0 ? "forked " + std::to_string(rank) : "error fork: " + std::string(std::strerror(errno)));
      ::_exit(0);
    }
    if (intermediate < 0) sendText(socket, "error fork: " + std::string(std::strerror(errno)));
    request.message.closeFds();
    if (intermediate > 0) ::waitpid(intermediate, nullptr, 0);
  }
}

bool supportsForkServer(const std::string& program) { return hasElfSection(program, kForkServerSection); }

}  // namespace ddprun
