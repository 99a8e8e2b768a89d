#pragma once
// How an attempt ended and what first showed it: typed inside the agent, turned into text only where it leaves
// (attempts.jsonl, the status page, the log).

namespace ddprun::launcher {

/// How an attempt ended.
enum class AttemptEndReason { kSuccess, kFailure, kHang, kSignal, kMembershipChange, kBackendLost };

/// "success", "failure", "hang", "signal", "membership change", "backend lost" (attempts.jsonl's "reason").
inline const char* toString(AttemptEndReason reason) {
  switch (reason) {
    case AttemptEndReason::kSuccess: return "success";
    case AttemptEndReason::kFailure: return "failure";
    case AttemptEndReason::kHang: return "hang";
    case AttemptEndReason::kSignal: return "signal";
    case AttemptEndReason::kMembershipChange: return "membership change";
    case AttemptEndReason::kBackendLost: return "backend lost";
  }
  return "?";
}

/// What first showed that the running attempt is ending: a restart's latency is timed from it.
enum class FirstSign { kFailure, kHang, kMembershipChange };

inline const char* toString(FirstSign sign) {
  switch (sign) {
    case FirstSign::kFailure: return "failure";
    case FirstSign::kHang: return "hang";
    case FirstSign::kMembershipChange: return "membership change";
  }
  return "?";
}

}  // namespace ddprun::launcher
