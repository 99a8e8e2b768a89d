// ddprun-orphan-guard: the orphan guard's guardian as a program of its own, which ddprun starts with posix_spawn
// (orphan_guard.cpp says why). Not for people: its one argument is the pipe's read end that ddprun left open.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "launcher/process/orphan_guardian.hpp"

int main(int argc, char** argv) {
  char* end = nullptr;
  const long fd = argc == 2 ? std::strtol(argv[1], &end, 10) : -1;
  if (argc != 2 || end == argv[1] || *end != '\0' || fd < 0) {
    std::fprintf(stderr, "ddprun-orphan-guard: started by ddprun only (one argument: the descriptor of its pipe)\n");
    return 2;
  }
  ddprun::launcher::runOrphanGuardian(static_cast<int>(fd));
}
