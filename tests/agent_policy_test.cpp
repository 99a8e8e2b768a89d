// The agent's restart, stop and membership rules against a fake worker group: no processes, no sockets, no
// sleeps. Each test feeds the policy the events a real agent would see and checks the actions it asks for.
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <string>
#include <vector>

#include "launcher/agent_policy.hpp"

namespace ddprun::launcher {
namespace {

/// Records every action as a short string ("start", "stop SIGTERM", "finish failed 1", …).
class FakeActions : public AgentActions {
 public:
  std::vector<std::string> log;
  std::vector<WorkerFailure> reported;
  std::vector<AttemptEnd> ended;  ///< every endAttempt, kept out of the log

  void beginRendezvous() override { log.push_back("rendezvous"); }
  void saveTracebacks() override { log.push_back("tracebacks"); }
  void endAttempt(const AttemptEnd& end) override { ended.push_back(end); }
  void startWorkers() override { log.push_back("start"); }
  void stopWorkers(int signal) override { log.push_back("stop " + signalName(signal)); }
  void killWorkers() override { log.push_back("kill"); }
  void killWorker(int localRank) override { log.push_back("kill " + std::to_string(localRank)); }
  void reportFailures(const std::vector<WorkerFailure>& failures) override {
    reported = failures;
    log.push_back("report " + std::to_string(failures.size()));
  }
  void finishNode(NodeEnd end, int exitCode) override {
    static const char* names[] = {"succeeded", "failed", "stopped", "abandoned"};
    log.push_back(std::string("finish ") + names[static_cast<int>(end)] + " " + std::to_string(exitCode));
  }
  void cutFinishShort() override { log.push_back("cut finish short"); }
  void confirmMembership() override { log.push_back("confirm membership"); }
  std::string replaceRefusal;     ///< what the claim answers ("": claimed)
  AgentPolicy* policy = nullptr;  ///< answered at once when set (as a store that answers instantly would), else later
  void replaceWorker(const WorkerExitEvent& event) override {
    log.push_back("replace " + std::to_string(event.localRank));
    if (policy == nullptr) return;
    if (replaceRefusal.empty()) {
      policy->onReplacementClaimed();
    } else {
      policy->onReplacementRefused(replaceRefusal);
    }
  }
  std::string last() const { return log.empty() ? "" : log.back(); }
};

WorkerExitEvent exitOf(int rank, int code, int signal = 0, bool stoppedByUs = false) {
  WorkerExitEvent e;
  e.localRank = rank;
  e.globalRank = rank;
  e.exit.exitCode = code;
  e.exit.signal = signal;
  e.stoppedByUs = stoppedByUs;
  e.failure.globalRank = rank;
  e.failure.message = "rank " + std::to_string(rank);
  e.failure.exit = e.exit;
  e.failure.cause = signal != 0 ? FailureCause::kSignal : code == 0 ? FailureCause::kEarlyExit : FailureCause::kExit;
  return e;
}

TEST(AgentPolicy, AFailureStopsTheGroupAndRestartsItWhileRestartsRemain) {
  FakeActions actions;
  AgentPolicy policy(actions, /*maxRestarts=*/1, /*multiNode=*/false);
  policy.start();
  EXPECT_EQ(actions.log, (std::vector<std::string>{"start"}));
  EXPECT_EQ(policy.state(), AgentState::kRunning);
  policy.onWorkerExit(exitOf(1, 3), false);
  EXPECT_EQ(actions.last(), "stop SIGTERM");
  EXPECT_EQ(policy.state(), AgentState::kStopping);
  EXPECT_EQ(policy.stopReason(), StopReason::kFailure);
  policy.onWorkerExit(exitOf(0, 0, SIGTERM, /*stoppedByUs=*/true), true);
  EXPECT_EQ(actions.last(), "start");
  EXPECT_EQ(policy.restartCount(), 1);
  EXPECT_EQ(policy.state(), AgentState::kRunning);
  // Second failure: no restarts left, the summary names only the rank that failed on its own.
  policy.onWorkerExit(exitOf(0, 7), false);
  policy.onWorkerExit(exitOf(1, 0, SIGTERM, true), true);
  EXPECT_EQ(actions.log, (std::vector<std::string>{"start", "stop SIGTERM", "start", "stop SIGTERM", "report 1",
                                                   "finish failed 1"}));
  ASSERT_EQ(actions.reported.size(), 1u);
  EXPECT_EQ(actions.reported[0].globalRank, 0);
  EXPECT_EQ(policy.exitCode(), 1);
}

TEST(AgentPolicy, WithRankReplacementAFailedRankIsReplacedAndTheOthersRunOn) {
  FakeActions actions;
  AgentPolicy policy(actions, /*maxRestarts=*/2, false);
  policy.enableRankReplacement();
  actions.policy = &policy;
  policy.start();
  policy.onWorkerExit(exitOf(1, 0, SIGKILL), false);
  EXPECT_EQ(actions.log, (std::vector<std::string>{"start", "replace 1"}));  // no stop: rank 0 keeps running
  EXPECT_EQ(policy.state(), AgentState::kRunning);
  EXPECT_EQ(policy.restartCount(), 1) << "a replacement counts against --max-restarts";
  EXPECT_EQ(policy.replacementCount(), 1);
  EXPECT_EQ(policy.replacingRank(), 1);
  policy.onReplacementFormed();
  // Again, once the first one's generation formed: replaced too; then no restarts are left.
  policy.onWorkerExit(exitOf(0, 1), false);
  EXPECT_EQ(actions.last(), "replace 0");
  policy.onReplacementFormed();
  policy.onWorkerExit(exitOf(1, 1), false);
  EXPECT_EQ(actions.last(), "stop SIGTERM") << "out of restarts: the group's rules end the job";
  policy.onWorkerExit(exitOf(0, 0, SIGTERM, true), true);
  EXPECT_EQ(actions.last(), "finish failed 1");
  EXPECT_EQ(policy.replacementCount(), 2);
}

TEST(AgentPolicy, RankReplacementFallsBackToAGroupRestartWhenItCannotWork) {
  {  // a second rank fails before the first replacement's generation formed
    FakeActions actions;
    AgentPolicy policy(actions, 5, false);
    policy.enableRankReplacement();
    actions.policy = &policy;
    policy.start();
    policy.onWorkerExit(exitOf(1, 0, SIGKILL), false);
    policy.onWorkerExit(exitOf(2, 1), false);
    EXPECT_EQ(actions.log, (std::vector<std::string>{"start", "replace 1", "stop SIGTERM"}));
    policy.onWorkerExit(exitOf(0, 0, SIGTERM, true), false);
    policy.onWorkerExit(exitOf(1, 0, SIGTERM, true), true);
    EXPECT_EQ(actions.last(), "start");
    EXPECT_EQ(policy.restartCount(), 2) << "the replacement and the group restart";
    EXPECT_EQ(policy.replacingRank(), -1) << "a new attempt replaces nothing";
  }
  {  // the last rank left fails: no survivor to take the state from
    FakeActions actions;
    AgentPolicy policy(actions, 5, false);
    policy.enableRankReplacement();
    actions.policy = &policy;
    policy.start();
    policy.onWorkerExit(exitOf(0, 1), true);
    EXPECT_EQ(actions.log, (std::vector<std::string>{"start", "stop SIGTERM", "start"}));  // the group's restart
    EXPECT_EQ(policy.replacementCount(), 0);
  }
  {  // the agent cannot (another node serves the workers' store, say)
    FakeActions actions;
    actions.replaceRefusal = "another node serves the workers' store";
    AgentPolicy policy(actions, 5, false);
    policy.enableRankReplacement();
    actions.policy = &policy;
    policy.start();
    policy.onWorkerExit(exitOf(1, 1), false);
    EXPECT_EQ(actions.log, (std::vector<std::string>{"start", "replace 1", "stop SIGTERM"}));
    EXPECT_EQ(policy.replacementCount(), 0);
  }
  {  // a rank already exited 0: the job is ending, there is no group to rejoin
    FakeActions actions;
    AgentPolicy policy(actions, 5, false);
    policy.enableRankReplacement();
    actions.policy = &policy;
    policy.start();
    policy.onWorkerExit(exitOf(0, 0), false);
    policy.onWorkerExit(exitOf(1, 1), false);
    EXPECT_EQ(actions.last(), "stop SIGTERM");
  }
  {  // without --restart-scope rank nothing is ever replaced
    FakeActions actions;
    AgentPolicy policy(actions, 5, false);
    policy.start();
    policy.onWorkerExit(exitOf(1, 1), false);
    EXPECT_EQ(actions.log, (std::vector<std::string>{"start", "stop SIGTERM"}));
  }
}

TEST(AgentPolicy, EveryRankThatFailedOnItsOwnIsReportedEvenWhileStopping) {
  FakeActions actions;
  AgentPolicy policy(actions, 0, false);
  policy.start();
  policy.onWorkerExit(exitOf(2, 1), false);
  policy.onWorkerExit(exitOf(0, 1, 0, false), false);       // its own error, seen after the stop began
  policy.onWorkerExit(exitOf(1, 0, SIGTERM, true), false);  // stopped by us: not a failure
  policy.onWorkerExit(exitOf(3, 0, SIGKILL, true), true);   // killed after the stop timeout: not either
  ASSERT_EQ(actions.reported.size(), 2u);
  EXPECT_EQ(actions.reported[0].globalRank, 2);
  EXPECT_EQ(actions.reported[1].globalRank, 0);
}

TEST(AgentPolicy, SuccessOfEveryWorkerEndsTheNode) {
  FakeActions actions;
  AgentPolicy policy(actions, 3, false);
  policy.start();
  policy.onWorkerExit(exitOf(0, 0), false);
  EXPECT_EQ(policy.state(), AgentState::kRunning);
  policy.onWorkerExit(exitOf(1, 0), true);
  EXPECT_EQ(actions.last(), "finish succeeded 0");
  EXPECT_EQ(policy.state(), AgentState::kFinishing);
  policy.onFinished();
  EXPECT_EQ(policy.state(), AgentState::kDone);
}

TEST(AgentPolicy, ASignalWhileFinishingCutsTheEndOfJobWaitShortAndKeepsTheExitCode) {
  FakeActions actions;
  AgentPolicy policy(actions, 3, /*multiNode=*/true);
  policy.start();
  policy.onRoundComplete();
  policy.onWorkerExit(exitOf(0, 0), true);
  ASSERT_EQ(policy.state(), AgentState::kFinishing);
  policy.onSignal(SIGTERM);
  EXPECT_EQ(actions.last(), "cut finish short");
  policy.onFinished();
  EXPECT_EQ(policy.state(), AgentState::kDone);
  EXPECT_EQ(policy.exitCode(), 0) << "the workers succeeded; the signal only shortened the wait";
}

TEST(AgentPolicy, ASignalIsForwardedAndASecondOneKills) {
  FakeActions actions;
  AgentPolicy policy(actions, 5, false);
  policy.start();
  policy.onSignal(SIGINT);
  EXPECT_EQ(actions.last(), "stop SIGINT");
  EXPECT_EQ(policy.stopReason(), StopReason::kSignal);
  policy.onSignal(SIGINT);
  EXPECT_EQ(actions.last(), "kill");
  policy.onWorkerExit(exitOf(0, 0, SIGINT, true), false);
  policy.onWorkerExit(exitOf(1, 0, SIGKILL, true), true);
  EXPECT_EQ(actions.last(), "finish stopped 130");
  EXPECT_EQ(policy.restartCount(), 0);  // a signal never restarts
}

TEST(AgentPolicy, ASignalDuringAFailureStopWinsAndNothingRestarts) {
  FakeActions actions;
  AgentPolicy policy(actions, 5, false);
  policy.start();
  policy.onWorkerExit(exitOf(0, 1), false);
  policy.onSignal(SIGTERM);
  EXPECT_EQ(actions.last(), "stop SIGTERM");
  policy.onWorkerExit(exitOf(1, 0, SIGTERM, true), true);
  EXPECT_EQ(actions.last(), "finish stopped 143");
}

TEST(AgentPolicy, ASignalWhileJoiningEndsAtOnceAndALateRoundStartsNothing) {
  FakeActions actions;
  AgentPolicy policy(actions, 0, /*multiNode=*/true);
  policy.start();
  EXPECT_EQ(actions.last(), "rendezvous");
  policy.onSignal(SIGTERM);
  EXPECT_EQ(actions.last(), "finish stopped 143");
  policy.onRoundComplete();
  EXPECT_EQ(actions.last(), "finish stopped 143");
}

TEST(AgentPolicy, MembershipChangesStartANewRoundWithoutUsingARestart) {
  FakeActions actions;
  AgentPolicy policy(actions, 1, true);
  policy.start();
  policy.onRoundComplete();
  EXPECT_EQ(actions.last(), "start");
  policy.onMembershipChange();
  EXPECT_EQ(policy.stopReason(), StopReason::kMembershipChange);
  policy.onWorkerExit(exitOf(0, 0, SIGTERM, true), true);
  EXPECT_EQ(actions.last(), "rendezvous");
  EXPECT_EQ(policy.restartCount(), 0);
  policy.onRoundComplete();
  // A failure in a multi-node job: first the question whether a node left with it; no: the restart is a new round
  // too, and it counts.
  policy.onWorkerExit(exitOf(0, 1), true);
  EXPECT_EQ(actions.last(), "confirm membership");
  policy.onMembershipVerdict(MembershipVerdict::kUnchanged);
  EXPECT_EQ(actions.last(), "rendezvous");
  EXPECT_EQ(policy.restartCount(), 1);
  // Membership checks are ignored while nothing runs.
  policy.onMembershipChange();
  EXPECT_EQ(actions.last(), "rendezvous");
}

TEST(AgentPolicy, AWorkerFailureThatCameWithANodeLeavingIsAMembershipChange) {
  FakeActions actions;
  AgentPolicy policy(actions, 0, /*multiNode=*/true);  // no restart to spend
  policy.start();
  policy.onRoundComplete();
  // The peers of a killed node fail in their collectives before their ddprun hears of it.
  policy.onWorkerExit(exitOf(1, 1), false);
  EXPECT_EQ(actions.last(), "stop SIGTERM");
  policy.onWorkerExit(exitOf(0, 0, SIGTERM, true), true);
  EXPECT_EQ(actions.last(), "confirm membership");
  policy.onMembershipVerdict(MembershipVerdict::kRoundChanged);
  EXPECT_EQ(actions.last(), "rendezvous");
  EXPECT_EQ(policy.restartCount(), 0);
  ASSERT_EQ(actions.ended.size(), 1u);
  EXPECT_EQ(std::string(toString(actions.ended[0].reason)), "membership change");
  EXPECT_EQ(actions.ended[0].failures.size(), 1u);  // the failure stays on record
  const size_t actionsSoFar = actions.log.size();
  policy.onMembershipVerdict(MembershipVerdict::kRoundChanged);  // a late answer changes nothing
  EXPECT_EQ(actions.log.size(), actionsSoFar);

  // Seen the other way round: the rendezvous reports the lost node while the workers stop for the failure.
  policy.onRoundComplete();
  policy.onWorkerExit(exitOf(1, 1), false);
  policy.onMembershipChange();
  policy.onWorkerExit(exitOf(0, 0, SIGTERM, true), true);
  EXPECT_EQ(actions.last(), "rendezvous");
  EXPECT_EQ(policy.restartCount(), 0);

  // The store stopped answering at the failure (its host died with its workers): a membership change too.
  policy.onRoundComplete();
  policy.onWorkerExit(exitOf(1, 1), true);
  EXPECT_EQ(actions.last(), "confirm membership");
  policy.onMembershipVerdict(MembershipVerdict::kStoreUnreachable);
  EXPECT_EQ(actions.last(), "rendezvous");
  EXPECT_EQ(policy.restartCount(), 0);

  // No node left: with no restarts left, the job fails.
  policy.onRoundComplete();
  policy.onWorkerExit(exitOf(1, 1), true);
  EXPECT_EQ(actions.last(), "confirm membership");
  policy.onMembershipVerdict(MembershipVerdict::kUnchanged);
  EXPECT_EQ(actions.last(), "finish failed 1");
}

TEST(AgentPolicy, ASignalWhileAskingAboutMembershipEndsAtOnce) {
  FakeActions actions;
  AgentPolicy policy(actions, 3, true);
  policy.start();
  policy.onRoundComplete();
  policy.onWorkerExit(exitOf(0, 1), true);
  EXPECT_EQ(actions.last(), "confirm membership");
  policy.onSignal(SIGTERM);
  EXPECT_EQ(actions.last(), "finish stopped 143");
  policy.onMembershipVerdict(MembershipVerdict::kRoundChanged);
  EXPECT_EQ(actions.last(), "finish stopped 143");
  EXPECT_EQ(policy.restartCount(), 0);
}

TEST(AgentPolicy, ALostBackendStopsTheWorkersAndEndsWithoutTalkingToIt) {
  FakeActions actions;
  AgentPolicy policy(actions, 9, true);
  policy.start();
  policy.onRoundComplete();
  policy.onBackendLost();
  EXPECT_EQ(actions.last(), "stop SIGTERM");
  policy.onWorkerExit(exitOf(0, 0, SIGTERM, true), true);
  EXPECT_EQ(actions.last(), "finish abandoned 1");
}

TEST(AgentPolicy, AFatalErrorEndsWithOneUnlessTheNodeIsAlreadyLeaving) {
  FakeActions actions;
  AgentPolicy policy(actions, 0, true);
  policy.start();
  policy.onFatalError();
  EXPECT_EQ(actions.last(), "finish abandoned 1");
  FakeActions leaving;
  AgentPolicy stopped(leaving, 0, true);
  stopped.start();
  stopped.onSignal(SIGINT);
  stopped.onFatalError();  // the rendezvous thread's error after ddprun began to stop
  EXPECT_EQ(leaving.last(), "finish stopped 130");
  EXPECT_EQ(stopped.exitCode(), 130);
}

TEST(AgentPolicy, AHangSavesTracebacksThenStopsTheGroupAsAFailureAndCountsARestart) {
  FakeActions actions;
  AgentPolicy policy(actions, 1, false);
  policy.start();
  WorkerFailure hung;
  hung.globalRank = 1;
  hung.cause = FailureCause::kHang;
  hung.message = "no progress for 12 s after step 30";
  policy.onHang({hung});
  EXPECT_EQ(policy.state(), AgentState::kCollecting);
  EXPECT_EQ(policy.stopReason(), StopReason::kHang);
  EXPECT_EQ(actions.last(), "tracebacks");
  policy.onTracebacksSaved();
  EXPECT_EQ(actions.last(), "stop SIGTERM");
  policy.onWorkerExit(exitOf(0, 0, SIGTERM, true), false);
  policy.onWorkerExit(exitOf(1, 0, SIGTERM, true), true);
  EXPECT_EQ(actions.last(), "start");
  EXPECT_EQ(policy.restartCount(), 1);
  ASSERT_EQ(actions.ended.size(), 1u);
  EXPECT_EQ(std::string(toString(actions.ended[0].reason)), "hang");
  ASSERT_EQ(actions.ended[0].failures.size(), 1u);
  EXPECT_EQ(actions.ended[0].failures[0].cause, FailureCause::kHang);
  // Python ranks end by the tracebacks' SIGABRT while the policy collects: the end waits for the tracebacks.
  policy.onHang({hung});
  policy.onWorkerExit(exitOf(0, 0, SIGABRT, true), false);
  policy.onWorkerExit(exitOf(1, 0, SIGABRT, true), true);
  EXPECT_EQ(policy.state(), AgentState::kCollecting);
  EXPECT_EQ(actions.last(), "tracebacks");
  policy.onTracebacksSaved();
  ASSERT_EQ(actions.reported.size(), 1u);
  EXPECT_EQ(actions.reported[0].message, "no progress for 12 s after step 30");
  EXPECT_EQ(actions.last(), "finish failed 1");
  EXPECT_EQ(actions.ended.size(), 2u);
}

/// A hang's records: rank `culprit` holds the others up (idle outside a collective), the others wait on it.
std::vector<WorkerFailure> hangRecords(int ranks, std::vector<int> culprits) {
  std::vector<WorkerFailure> records;
  for (int rank = 0; rank < ranks; ++rank) {
    WorkerFailure f;
    f.globalRank = f.localRank = rank;
    f.cause = FailureCause::kHang;
    f.message = "hang: no progress for 9 s after step 30; rank " + std::to_string(rank);
    f.waitsOnPeers = std::find(culprits.begin(), culprits.end(), rank) == culprits.end();
    records.push_back(f);
  }
  return records;
}

TEST(AgentPolicy, WithRankReplacementAHangWithOneCulpritKillsAndReplacesOnlyThatRank) {
  FakeActions actions;
  AgentPolicy policy(actions, 2, false);
  policy.enableRankReplacement();
  actions.policy = &policy;
  policy.start();
  policy.onHang(hangRecords(3, {2}));
  EXPECT_EQ(actions.last(), "tracebacks") << "what the ranks can tell is saved first, as for any hang";
  policy.onTracebacksSaved();
  EXPECT_EQ(actions.last(), "kill 2") << "only the culprit";
  EXPECT_EQ(policy.state(), AgentState::kRunning);
  EXPECT_EQ(policy.replacingRank(), 2) << "no other replacement while the culprit is being killed";
  // Its exit is ddprun's doing; it is replaced with the hang's record, not stopped as a group.
  policy.onWorkerExit(exitOf(2, 0, SIGKILL, /*stoppedByUs=*/true), false);
  EXPECT_EQ(actions.log, (std::vector<std::string>{"start", "tracebacks", "kill 2", "replace 2"}));
  EXPECT_EQ(policy.restartCount(), 1);
  EXPECT_EQ(policy.replacementCount(), 1);
  EXPECT_TRUE(actions.ended.empty()) << "the attempt goes on";
  policy.onReplacementFormed();
  // The hang's records are gone with it: a later failure names only its own rank.
  policy.onWorkerExit(exitOf(0, 0, SIGKILL), true);
  EXPECT_EQ(actions.last(), "start");
  ASSERT_EQ(actions.ended.size(), 1u);
  ASSERT_EQ(actions.ended[0].failures.size(), 1u);
  EXPECT_EQ(actions.ended[0].failures[0].globalRank, 0);
}

TEST(AgentPolicy, AHangIsAGroupRestartWhenItsEvidenceDoesNotNameOneRankOrTheReplacementCannotBeMade) {
  {  // two culprits: no single rank to replace
    FakeActions actions;
    AgentPolicy policy(actions, 2, false);
    policy.enableRankReplacement();
    actions.policy = &policy;
    policy.start();
    policy.onHang(hangRecords(3, {1, 2}));
    policy.onTracebacksSaved();
    EXPECT_EQ(actions.last(), "stop SIGTERM");
    EXPECT_EQ(policy.stopReason(), StopReason::kHang);
  }
  {  // every rank waits in a collective (a deadlock): nobody to blame alone
    FakeActions actions;
    AgentPolicy policy(actions, 2, false);
    policy.enableRankReplacement();
    actions.policy = &policy;
    policy.start();
    policy.onHang(hangRecords(2, {}));
    policy.onTracebacksSaved();
    EXPECT_EQ(actions.last(), "stop SIGTERM");
  }
  {  // without --restart-scope rank
    FakeActions actions;
    AgentPolicy policy(actions, 2, false);
    policy.start();
    policy.onHang(hangRecords(2, {1}));
    policy.onTracebacksSaved();
    EXPECT_EQ(actions.last(), "stop SIGTERM");
  }
  {  // no restart left: the group's rules end the job
    FakeActions actions;
    AgentPolicy policy(actions, 0, false);
    policy.enableRankReplacement();
    actions.policy = &policy;
    policy.start();
    policy.onHang(hangRecords(2, {1}));
    policy.onTracebacksSaved();
    EXPECT_EQ(actions.last(), "stop SIGTERM");
  }
  {  // a rank exits while the tracebacks are saved: the evidence is stale
    FakeActions actions;
    AgentPolicy policy(actions, 2, false);
    policy.enableRankReplacement();
    actions.policy = &policy;
    policy.start();
    policy.onHang(hangRecords(3, {2}));
    policy.onWorkerExit(exitOf(0, 1), false);
    policy.onTracebacksSaved();
    EXPECT_EQ(actions.last(), "stop SIGTERM");
  }
  {  // the agent cannot replace it once killed: the group stops for the hang, with the hang's records
    FakeActions actions;
    actions.replaceRefusal = "the workers' store did not answer";
    AgentPolicy policy(actions, 2, false);
    policy.enableRankReplacement();
    actions.policy = &policy;
    policy.start();
    policy.onHang(hangRecords(2, {1}));
    policy.onTracebacksSaved();
    policy.onWorkerExit(exitOf(1, 0, SIGKILL, true), false);
    EXPECT_EQ(actions.log, (std::vector<std::string>{"start", "tracebacks", "kill 1", "replace 1", "stop SIGTERM"}));
    EXPECT_EQ(policy.stopReason(), StopReason::kHang);
    policy.onWorkerExit(exitOf(0, 0, SIGTERM, true), true);
    EXPECT_EQ(actions.last(), "start");
    ASSERT_EQ(actions.ended.size(), 1u);
    EXPECT_EQ(std::string(toString(actions.ended[0].reason)), "hang");
    EXPECT_EQ(actions.ended[0].failures.size(), 2u);
  }
  {  // another rank fails on its own while the culprit is being killed: the group restarts
    FakeActions actions;
    AgentPolicy policy(actions, 2, false);
    policy.enableRankReplacement();
    actions.policy = &policy;
    policy.start();
    policy.onHang(hangRecords(3, {2}));
    policy.onTracebacksSaved();
    policy.onWorkerExit(exitOf(0, 1), false);
    EXPECT_EQ(actions.last(), "stop SIGTERM");
    policy.onWorkerExit(exitOf(2, 0, SIGKILL, true), false);
    policy.onWorkerExit(exitOf(1, 0, SIGTERM, true), true);
    EXPECT_EQ(actions.last(), "start");
    EXPECT_EQ(policy.replacementCount(), 0);
  }
}

TEST(AgentPolicy, ASignalWhileCollectingStopsAtOnce) {
  FakeActions actions;
  AgentPolicy policy(actions, 3, false);
  policy.start();
  policy.onHang({WorkerFailure{}});
  policy.onSignal(SIGINT);
  EXPECT_EQ(actions.last(), "stop SIGINT");
  EXPECT_EQ(policy.stopReason(), StopReason::kSignal);
  policy.onTracebacksSaved();  // late: ignored
  EXPECT_EQ(actions.last(), "stop SIGINT");
  policy.onWorkerExit(exitOf(0, 0, SIGINT, true), true);
  EXPECT_EQ(actions.last(), "finish stopped 130");
}

TEST(AgentPolicy, ARankThatExitedZeroWhileOthersRanJoinsTheFailureThatFollows) {
  FakeActions actions;
  AgentPolicy policy(actions, 0, false);
  policy.start();
  auto early = exitOf(1, 0);
  early.failure.cause = FailureCause::kEarlyExit;
  early.failure.order = std::chrono::system_clock::now();
  policy.onWorkerExit(early, false);
  EXPECT_EQ(policy.state(), AgentState::kRunning) << "an exit 0 alone stops nothing";
  auto peer = exitOf(0, 1);  // its collective failed: the peer is gone
  peer.failure.message = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer";
  peer.failure.order = early.failure.order + std::chrono::milliseconds(3);
  policy.onWorkerExit(peer, true);
  ASSERT_EQ(actions.reported.size(), 2u);
  EXPECT_EQ(actions.reported[rootCauseIndex(actions.reported)].globalRank, 1);
  EXPECT_EQ(actions.reported[rootCauseIndex(actions.reported)].cause, FailureCause::kEarlyExit);
  // At the end of a healthy job ranks exit 0 one after the other: a success, nothing reported.
  FakeActions fine;
  AgentPolicy ok(fine, 0, false);
  ok.start();
  ok.onWorkerExit(exitOf(0, 0), false);
  ok.onWorkerExit(exitOf(1, 0), true);
  EXPECT_TRUE(fine.reported.empty());
  EXPECT_EQ(fine.last(), "finish succeeded 0");
  ASSERT_EQ(fine.ended.size(), 1u);
  EXPECT_EQ(std::string(toString(fine.ended[0].reason)), "success");
}

TEST(AgentPolicy, ARankThatExitedZeroIsNoFailureWhenThePeerThatFailsDidSoOfItsOwnError) {
  // Rank 0 prints "ok" and exits 0; rank 1 then raises a KeyError of its own: rank 0 broke nothing.
  for (const std::string own : {"KeyError: 'labels'", "exited with code 1 and wrote no error file"}) {
    FakeActions actions;
    AgentPolicy policy(actions, 0, false);
    policy.start();
    policy.onWorkerExit(exitOf(0, 0), false);
    auto failed = exitOf(1, 1);
    failed.failure.message = own;
    policy.onWorkerExit(failed, true);
    ASSERT_EQ(actions.reported.size(), 1u) << own;
    EXPECT_EQ(actions.reported[0].globalRank, 1);
    ASSERT_EQ(actions.ended.size(), 1u);
    ASSERT_EQ(actions.ended[0].failures.size(), 1u) << "the early exit is not in the attempt's record";
  }
  // The hang path: a rank that spins on its own (no peer waits on anyone) is not held up by an exit 0.
  FakeActions hang;
  AgentPolicy hangPolicy(hang, 0, false);
  hangPolicy.start();
  hangPolicy.onWorkerExit(exitOf(0, 0), false);
  WorkerFailure spinning = exitOf(1, 0).failure;
  spinning.cause = FailureCause::kHang;
  hangPolicy.onHang({spinning});
  hangPolicy.onTracebacksSaved();
  hangPolicy.onWorkerExit(exitOf(1, 0, SIGTERM, true), true);
  ASSERT_EQ(hang.reported.size(), 1u);
  EXPECT_EQ(hang.reported[0].globalRank, 1);
}

TEST(AgentPolicy, LostAPeerReadsWhatCollectivesSayWhenAPeerIsGone) {
  WorkerFailure f;
  for (const std::string text :
       {"RuntimeError: [pair.cc:598] Connection closed by peer [127.0.0.1]:5", "RuntimeError: Connection reset by peer",
        "DistNetworkError: Broken pipe", "c10::Error: ... a peer rank is dead or stuck (see its log)",
        "NCCL error: remote process exited or there was a network error"}) {
    f.message = text;
    EXPECT_TRUE(lostAPeer(f)) << text;
  }
  for (const std::string text : {"KeyError: 'peer'", "ValueError: bad learning rate", ""}) {
    f.message = text;
    EXPECT_FALSE(lostAPeer(f)) << text;
  }
  f.message = "exited with code 1 and wrote no error file";
  f.traceback = "Traceback (most recent call last):\nRuntimeError: Connection closed by peer\n";
  EXPECT_TRUE(lostAPeer(f)) << "from the end of its stderr";
}

TEST(AgentPolicy, AttemptsWithoutProgressEndTheJobWithItsOwnExitCode) {
  FakeActions actions;
  AgentPolicy policy(actions, /*maxRestarts=*/10, false, /*maxNoProgressAttempts=*/2);
  policy.start();
  // Every attempt resumes from the checkpoint at its start step.
  auto failAttempt = [&](long long startStep, long long bestStep) {
    policy.onWorkerExit(exitOf(0, 1), false);
    policy.recordAttemptProgress(startStep, bestStep);
    policy.onWorkerExit(exitOf(1, 0, SIGTERM, true), true);
  };
  failAttempt(0, 5);    // progress: from 0 to 5
  failAttempt(5, 5);    // none (1)
  failAttempt(5, 12);   // progress again: the count starts over
  failAttempt(12, 12);  // none (1)
  EXPECT_EQ(actions.last(), "start");
  failAttempt(3, 3);  // none (2): give up
  EXPECT_EQ(actions.last(), "finish failed 93");
  EXPECT_EQ(policy.exitCode(), kNoProgressExitCode);
  EXPECT_EQ(policy.restartCount(), 4);
}

TEST(AgentPolicy, AttemptsThatEndNoFurtherThanTheBestBeforeForOneCauseCountWhereverTheyStarted) {
  // A script without checkpoints restarts from step 0 and hangs at step 5 in every attempt: each attempt gets from 0 to
  // 5 ("past where it started"), none gets further than the first. With 2 allowed, the job ends after attempt 2.
  FakeActions actions;
  AgentPolicy policy(actions, /*maxRestarts=*/10, false, /*maxNoProgressAttempts=*/2);
  policy.start();
  auto hangAttempt = [&] {
    WorkerFailure hung = exitOf(0, 0).failure;
    hung.cause = FailureCause::kHang;
    policy.onHang({hung});
    policy.onTracebacksSaved();
    policy.recordAttemptProgress(0, 5);
    policy.onWorkerExit(exitOf(0, 0, SIGTERM, true), false);
    policy.onWorkerExit(exitOf(1, 0, SIGTERM, true), true);
  };
  hangAttempt();  // progress: the first to reach 5
  hangAttempt();  // none (1)
  EXPECT_EQ(actions.last(), "start");
  hangAttempt();  // none (2): give up
  EXPECT_EQ(actions.last(), "finish failed 93");
  EXPECT_EQ(policy.restartCount(), 2);
}

TEST(AgentPolicy, ADifferentCauseStartsANewRunOfAttemptsWithoutProgress) {
  // Resumed at 40 each time, the attempts end before 45 but each for another reason than the one before: flaky
  // hardware, not a bug that restarts repeat.
  FakeActions actions;
  AgentPolicy policy(actions, /*maxRestarts=*/10, false, /*maxNoProgressAttempts=*/2);
  policy.start();
  int i = 0;
  for (long long best : {45, 43, 44, 42, 41}) {
    const bool crash = i++ % 2 == 0;
    policy.onWorkerExit(crash ? exitOf(0, 0, SIGSEGV) : exitOf(0, 1), false);
    policy.recordAttemptProgress(best == 45 ? 0 : 40, best);
    policy.onWorkerExit(exitOf(1, 0, SIGTERM, true), true);
    EXPECT_EQ(actions.last(), "start") << "attempt reaching " << best;
  }
  EXPECT_EQ(policy.restartCount(), 5);
}

TEST(AgentPolicy, AttemptsKilledFromOutsideBeforeTheyCouldMoveAreNotCountedButCrashesAre) {
  // Three quick SIGKILLs right after each restart (pre-emption, the OOM killer) used to end a job with 93
  // while restarts were left; a rank that crashes (SIGSEGV) or exits 1 where it resumed still counts.
  FakeActions actions;
  AgentPolicy policy(actions, /*maxRestarts=*/10, false, /*maxNoProgressAttempts=*/2);
  policy.start();
  auto attempt = [&](int code, int signal) {
    policy.onWorkerExit(exitOf(0, code, signal), false);
    policy.recordAttemptProgress(30, 30);
    policy.onWorkerExit(exitOf(1, 0, SIGTERM, true), true);
  };
  for (int i = 0; i < 4; ++i) {
    attempt(0, SIGKILL);
    EXPECT_EQ(actions.last(), "start");
  }
  attempt(0, SIGTERM);
  attempt(0, SIGSEGV);  // none (1)
  EXPECT_EQ(actions.last(), "start");
  attempt(0, SIGSEGV);  // none (2), the same cause: give up
  EXPECT_EQ(actions.last(), "finish failed 93");
}

}  // namespace
}  // namespace ddprun::launcher
