#pragma once
// ddprun's spare rank protocol, the program's side (version 1). With `ddprun --restart-scope rank
// --start-method forkserver` and a program that supports both protocols and this one, ddprun keeps one *spare*
// per node: a fork of the forkserver template that does, ahead of any failure, the part of a rank's start that does
// not depend on which rank it becomes (for the C++ worker: one training step of a throwaway model, so that LibTorch's
// first-use costs and the allocator's first page faults are paid), and then waits to be told. When a rank fails,
// ddprun claims the spare as the replacement instead of forking a new process: what is left on the failure's path
// is joining the survivors (worker/rank_replacement.hpp).
//
// A program supports it by linking this file and calling awaitSpareClaim() after runForkServerIfAsked() returned,
// once it has done its rank-independent start-up, before it reads RANK or any other variable of the rank. Linking
// it puts the marker ddprun looks for into the program: an ELF section named ".ddprun_spare_rank".
//
// A spare is forked from the template like a rank, with DDPRUN_SPARE_RANK=1 and, as its stdin, a Unix
// SOCK_SEQPACKET socket to ddprun. The claim is one message on it (common/handover.hpp):
//   ddprun -> spare   "claim\n<KEY=VALUE>\n…"   with 3 descriptors (SCM_RIGHTS): the rank's stdin, stdout, stderr
// The spare makes them its fds 0-2 (closing the socket), sets the environment (every variable of the rank:
// RANK, LOCAL_RANK, DDPRUN_COMM_GENERATION, TORCHELASTIC_ERROR_FILE, …), unsets DDPRUN_SPARE_RANK and returns
// from awaitSpareClaim() as that rank. When ddprun closes the socket instead (the job ends, or it discards the
// spare), the spare exits 0; it dies with ddprun through the PR_SET_PDEATHSIG of every forked rank.
#include <string>

namespace ddprun {

/// The environment variable that makes a forked process a spare; its stdin is the claim socket.
inline constexpr const char* kSpareRankEnv = "DDPRUN_SPARE_RANK";
/// The ELF section whose presence says a program supports the protocol.
inline constexpr const char* kSpareRankSection = ".ddprun_spare_rank";

/// True in a spare that has not been claimed yet.
bool isSpareRank();

/// Returns at once in a process that is not a spare. In a spare, waits for ddprun's claim (as long as the job
/// lasts) and returns as the rank it names, its streams and environment set; exits 0 when ddprun closes the socket
/// or sends something else. Throws nothing.
void awaitSpareClaim();

/// Whether `program` (a path) is an ELF file with the ".ddprun_spare_rank" section.
bool supportsSpareRank(const std::string& program);

}  // namespace ddprun
