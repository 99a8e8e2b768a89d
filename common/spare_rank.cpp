#include "common/spare_rank.hpp"

#include <unistd.h>

#include <cstdlib>

#include "common/elf_section.hpp"
#include "common/handover.hpp"

// The marker: linking this file is what makes a program support the protocol.
__attribute__((section(".ddprun_spare_rank"), used)) static const char kSpareRankMarker[] = "ddprun spare rank v1";

namespace ddprun {

bool isSpareRank() { return std::getenv(kSpareRankEnv) != nullptr; }

void awaitSpareClaim() {
  if (!isSpareRank()) return;
  (void)kSpareRankMarker;
  Handover claim;
  // The claim socket is stdin; it blocks until ddprun writes or closes it.
  if (!receiveHandover(STDIN_FILENO, claim)) ::_exit(0);
  if (claim.verb() != "claim") ::_exit(0);
  ::unsetenv(kSpareRankEnv);
  applyHandover(claim, claim.environment(1));  // stdin becomes the rank's: the socket closes with it
}

bool supportsSpareRank(const std::string& program) { return hasElfSection(program, kSpareRankSection); }

}  // namespace ddprun
