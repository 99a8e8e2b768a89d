// The hang watch on recorded evidence: every trace in tests/data/watch_traces/ (recorded from real jobs with ddprun
// --watch-record by tools/record-watch-traces.sh, on a quiet machine and under two busy loops per core) replayed
// through the real WorkerWatch on a fake clock, against the verdict and the verdict time its row in manifest.json
// expects. A new look-alike of a hang becomes a trace and a row here, not a new real-process test.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>

#include "support/watch_replay.hpp"

namespace ddprun::launcher {
namespace {

const std::string kTraces = std::string(DDPRUN_SOURCE_DIR) + "/tests/data/watch_traces/";

struct Case {
  std::string trace;
  std::string description;
  std::string load;    ///< quiet or loaded (two busy loops per core)
  std::string expect;  ///< none, hang or spin
  std::vector<int> culprits;
  double mark = 0;     ///< seconds into the trace at which the fault began (hangs, spins)
  double within[2]{};  ///< the verdict comes this long after the mark, in seconds
};

std::vector<Case> manifest() {
  std::ifstream in(kTraces + "manifest.json");
  const auto rows = nlohmann::json::parse(in);
  std::vector<Case> cases;
  for (const auto& row : rows) {
    Case c;
    c.trace = row.at("trace").get<std::string>();
    c.description = row.at("case").get<std::string>();
    c.load = row.at("load").get<std::string>();
    c.expect = row.at("expect").get<std::string>();
    if (row.contains("culprits")) c.culprits = row.at("culprits").get<std::vector<int>>();
    if (row.contains("mark")) c.mark = row.at("mark").get<double>();
    if (row.contains("within")) {
      c.within[0] = row.at("within").at(0).get<double>();
      c.within[1] = row.at("within").at(1).get<double>();
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

void PrintTo(const Case& c, std::ostream* out) { *out << c.trace; }

class Recorded : public ::testing::TestWithParam<Case> {};

TEST_P(Recorded, GetsItsVerdictAtItsTime) {
  const Case& c = GetParam();
  const Trace trace = readTrace(kTraces + c.trace);
  const test::ReplayOutcome outcome = test::replayTrace(trace);
  const std::string what = c.description + " (" + c.load + ", " + c.trace + ")";
  if (std::getenv("DDPRUN_REPLAY_TABLE") != nullptr) {  // docs/benchmarks.md's corpus table
    const auto at = c.expect == "spin" ? outcome.spinAt : outcome.hangAt;
    std::cout << "| " << c.description << " | " << c.load << " | " << c.expect << " | "
              << (at ? std::to_string(*at - c.mark).substr(0, 4) + " s" : std::string("none")) << " |\n";
  }
  if (c.expect == "none") {
    EXPECT_FALSE(outcome.hangAt) << what << ": hung at " << outcome.hangAt.value_or(0) << " s: " << outcome.hangMessage;
    EXPECT_FALSE(outcome.spinAt) << what << ": a spin reported at " << outcome.spinAt.value_or(0) << " s";
    EXPECT_FALSE(outcome.stragglerAt) << what << ": a straggler at " << outcome.stragglerAt.value_or(0) << " s";
    EXPECT_GT(outcome.end, 10) << what << ": the trace is too short to say anything";
    return;
  }
  const std::optional<double> at = c.expect == "spin" ? outcome.spinAt : outcome.hangAt;
  ASSERT_TRUE(at) << what << ": no " << c.expect << " in " << outcome.end << " s";
  EXPECT_GE(*at - c.mark, c.within[0]) << what;
  EXPECT_LE(*at - c.mark, c.within[1]) << what;
  if (c.expect == "spin") {
    // Reported, not acted on: the group is stopped only at the busy timeout (the recordings set a short one).
    EXPECT_GE(outcome.hangAt.value_or(1e9), trace.header.hang.busyTimeoutSeconds)
        << what << ": " << outcome.hangMessage;
  } else {
    EXPECT_EQ(outcome.culprits, c.culprits) << what << ": " << outcome.hangMessage;
  }
}

std::string caseName(const ::testing::TestParamInfo<Case>& info) {
  std::string name = info.param.trace.substr(0, info.param.trace.find('.'));
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Traces, Recorded, ::testing::ValuesIn(manifest()), caseName);

TEST(WatchTraces, TheCorpusCoversHealthyJobsAndHangsQuietAndUnderLoad) {
  const auto cases = manifest();
  EXPECT_GE(cases.size(), 30u);
  std::set<std::string> kinds;
  for (const auto& c : cases) kinds.insert(c.expect + "/" + c.load);
  for (const char* kind : {"none/quiet", "none/loaded", "hang/quiet", "hang/loaded", "spin/quiet", "spin/loaded"}) {
    EXPECT_EQ(kinds.count(kind), 1u) << kind;
  }
}

TEST(WatchTraces, ASpinIsAHangWhereTheUserAskedForIt) {
  // The same recorded spin, replayed with --hang-spin-action restart: hung when it would have been reported.
  for (const auto& c : manifest()) {
    if (c.expect != "spin") continue;
    const Trace trace = readTrace(kTraces + c.trace);
    const auto reported = test::replayTrace(trace);
    const auto restarted =
        test::replayTrace(trace, [](TraceHeader& h) { h.hang.spinAction = HangSettings::SpinAction::kRestart; });
    ASSERT_TRUE(reported.spinAt) << c.trace;
    ASSERT_TRUE(restarted.hangAt) << c.trace;
    EXPECT_NEAR(*restarted.hangAt, *reported.spinAt, 0.5) << c.trace;
    return;
  }
  FAIL() << "no spin in the corpus";
}

}  // namespace
}  // namespace ddprun::launcher
