#pragma once
// Test helper: an agent snapshot of a 2-rank job on one node with every field filled, the way a running
// job with one hung rank and one earlier failed attempt looks. `tick` moves the steps and the step-rate
// history along, as successive polls would see them.
#include <chrono>

#include "launcher/status/agent_snapshot.hpp"

namespace ddprun::test {

inline status::AgentSnapshot fakeSnapshot(int tick = 0) {
  using namespace std::chrono;
  const int64_t now = duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
  status::AgentSnapshot s;
  s.runId = "mnist-42";
  s.node = "node-a";
  s.role = "trainer";
  s.groupRank = 0;
  s.nodes = 1;
  s.round = 1;
  s.attempt = 1;
  s.restartsUsed = 1;
  s.maxRestarts = 3;
  s.state = "running";
  s.worldSize = 2;
  s.startUnixMs = now - 95'000;
  s.snapshotUnixMs = now;
  for (int local = 0; local < 2; ++local) {
    status::RankSnapshot r;
    r.localRank = local;
    r.globalRank = local;
    r.pid = 4242 + local;
    r.state = local == 0 ? "running" : "hung";
    r.step = local == 0 ? 120 + tick : 97;
    r.stepsPerSecond = local == 0 ? 12.5 : 0;
    for (int i = 0; i < 20; ++i) r.stepRateHistory.push_back(local == 0 ? 10 + (i + tick) % 5 : (i < 12 ? 11 : 0));
    r.progressAgeSeconds = local == 0 ? 0.2 : 31.5;
    r.outputAgeSeconds = local == 0 ? 1.0 : 30.0;
    r.hung = local == 1;
    r.stepsTotal = local == 0 ? 175 + tick : 152;
    r.phase = local == 0 ? "" : "eval";
    if (local == 0) {
      r.samplesPerSecond = 800;
      r.scalars = {{"loss", 0.31}};
    }
    s.ranks.push_back(r);
  }
  s.store = status::StoreStats{3, 17, 1234};
  status::Culprit culprit;
  culprit.rank = 1;
  culprit.localRank = 1;
  culprit.cause = "exit";
  culprit.exitCode = 1;
  culprit.message = "RuntimeError: injected";
  culprit.errorFile = "/tmp/logs/attempt_0/1/error.json";
  s.attempts.push_back({0, now - 90'000, now - 60'000, "failure", 2, 55, {culprit}, {}});
  s.attempts.push_back({1, now - 59'000, std::nullopt, "", 2, 120 + tick, {}, {}});
  s.lastFailure = "worker failed (attempt 0)\n  rank 1 (local 1, pid 4100): exit code 1\n    RuntimeError: injected";
  s.counters = {1, 2, 1, {{"failure", 1}}};
  s.hangTimeoutSeconds = 5;
  s.lastFailureUnixMs = now - 60'000;
  return s;
}

}  // namespace ddprun::test
