// A program that supports ddprun's forkserver protocol, for the launcher's tests: a slow "start-up" (it
// sleeps START_SECONDS and fills a buffer), then runForkServerIfAsked(), then one line per rank saying who it
// is and where it came from (and what SIGUSR1 does in it). EXIT_RANK / EXIT_ATTEMPT make that rank exit 3 in
// that attempt, once the file WAIT_FILE exists when it is given (at most 60 s); HANG_SECONDS makes every rank
// sleep before it ends.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "common/forkserver.hpp"

namespace {
std::string env(const char* name, const char* fallback = "") {
  const char* value = std::getenv(name);
  return value != nullptr ? value : fallback;
}
}  // namespace

int main() {
  const pid_t starter = ::getpid();
  std::this_thread::sleep_for(std::chrono::duration<double>(std::stod(env("START_SECONDS", "0"))));
  std::vector<char> data(64 << 20, 'd');  // the "decoded data set", shared copy-on-write by the ranks
  std::printf("start-up done in pid %d\n", starter);
  std::fflush(stdout);
  ddprun::runForkServerIfAsked();
  struct sigaction usr1 {};
  ::sigaction(SIGUSR1, nullptr, &usr1);
  std::printf("rank %s attempt %s pid %d parent %d started-by %d pgid %d data %c forkserver-fd %s usr1 %s\n",
              env("RANK", "?").c_str(), env("TORCHELASTIC_RESTART_COUNT", "?").c_str(), ::getpid(), ::getppid(),
              starter, ::getpgrp(), data[12345], env("DDPRUN_FORKSERVER_FD", "unset").c_str(),
              usr1.sa_handler == SIG_DFL   ? "default"
              : usr1.sa_handler == SIG_IGN ? "ignored"
                                           : "handled");
  std::fflush(stdout);
  if (env("RANK") == env("EXIT_RANK", "-") && env("TORCHELASTIC_RESTART_COUNT") == env("EXIT_ATTEMPT", "0")) {
    const std::string waitFile = env("WAIT_FILE");
    for (int i = 0; i < 6000 && !waitFile.empty() && !std::filesystem::exists(waitFile); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return 3;
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(std::stod(env("HANG_SECONDS", "0"))));
  return 0;
}
