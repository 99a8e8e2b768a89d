#include "common/spare_rank.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "common/elf_section.hpp"
#include "common/fd_passing.hpp"
#include "common/handover.hpp"

// The marker: linking this file is what makes a program support the protocol.
__attribute__((section(".ddprun_spare_rank"), used)) static const char kSpareRankMarker[] = "ddprun spare rank v1";

namespace ddprun {

bool isSpareRank() {
  if (std::getenv(kSpareRankEnv) == nullptr) return false;
  if (isSeqPacketSocket(STDIN_FILENO)) return true;
  // Inherited by accident (ddprun's spares get their claim socket as stdin): a normal rank, the marker dropped.
  std::fprintf(stderr, "%s is set but stdin is not ddprun's claim socket; ignoring it\n", kSpareRankEnv);
  ::unsetenv(kSpareRankEnv);
  return false;
}

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
