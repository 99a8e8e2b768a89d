// The program's side of the spare rank protocol (common/spare_rank.hpp), in real child processes: a spare takes the
// streams and environment of the claim and goes on as that rank; a spare whose socket closes exits 0; a process
// that is no spare returns at once. ddprun's side, with the real worker: ddprun_worker_test (RankReplacement…).
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "common/fd_passing.hpp"
#include "common/spare_rank.hpp"

namespace {

/// Everything readable from `fd` until its end.
std::string readAll(int fd) {
  std::string text;
  char buffer[256];
  for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) > 0;) text.append(buffer, static_cast<size_t>(n));
  return text;
}

/// Forks a spare whose stdin is the returned socket's peer; it writes what it became to its stdout after the claim.
pid_t forkSpare(int& ddprunEnd) {
  int pair[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET, 0, pair), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(pair[0]);
    ::dup2(pair[1], STDIN_FILENO);
    ::close(pair[1]);
    ::setenv(ddprun::kSpareRankEnv, "1", 1);
    ::setenv("RANK", "spare", 1);
    ddprun::awaitSpareClaim();
    std::string line;
    char c;
    while (::read(STDIN_FILENO, &c, 1) == 1 && c != '\n') line += c;
    const char* rank = std::getenv("RANK");
    const std::string report = std::string("rank=") + (rank ? rank : "") +
                               " spare=" + (ddprun::isSpareRank() ? "yes" : "no") + " stdin=" + line + "\n";
    [[maybe_unused]] ssize_t n = ::write(STDOUT_FILENO, report.data(), report.size());
    ::_exit(7);
  }
  ::close(pair[1]);
  ddprunEnd = pair[0];
  return pid;
}

TEST(SpareRank, AClaimedSpareTakesTheRanksStreamsAndEnvironment) {
  int socket = -1;
  const pid_t spare = forkSpare(socket);
  ASSERT_GT(spare, 0);
  int in[2], out[2];
  ASSERT_EQ(::pipe(in), 0);
  ASSERT_EQ(::pipe(out), 0);
  const std::string claim = "claim\nRANK=3\nLOCAL_RANK=1\n";
  ASSERT_EQ(ddprun::sendWithFds(socket, claim, {in[0], out[1], out[1]}), static_cast<long>(claim.size()));
  ::close(socket);
  ::close(in[0]);
  ::close(out[1]);
  ASSERT_EQ(::write(in[1], "from ddprun\n", 12), 12);
  ::close(in[1]);
  EXPECT_EQ(readAll(out[0]), "rank=3 spare=no stdin=from ddprun\n");
  ::close(out[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(spare, &status, 0), spare);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 7) << "it went on as the rank, past the claim";
}

TEST(SpareRank, ASpareWhoseSocketClosesEndsWithExitCodeZero) {
  int socket = -1;
  const pid_t spare = forkSpare(socket);
  ASSERT_GT(spare, 0);
  ::close(socket);  // the job ended, or ddprun discarded it
  int status = 0;
  ASSERT_EQ(::waitpid(spare, &status, 0), spare);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "it never went on as a rank";
}

TEST(SpareRank, ASpareSentSomethingElseThanAClaimEndsWithExitCodeZero) {
  int socket = -1;
  const pid_t spare = forkSpare(socket);
  ASSERT_GT(spare, 0);
  const std::string other = "fork\ngroup\nRANK=1\n";
  ASSERT_EQ(ddprun::sendWithFds(socket, other, {}), static_cast<long>(other.size()));
  int status = 0;
  ASSERT_EQ(::waitpid(spare, &status, 0), spare);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ::close(socket);
}

TEST(SpareRank, AProcessThatIsNoSpareReturnsAtOnce) {
  ::unsetenv(ddprun::kSpareRankEnv);
  EXPECT_FALSE(ddprun::isSpareRank());
  ddprun::awaitSpareClaim();  // would block on stdin if it were a spare
  SUCCEED();
}

}  // namespace
