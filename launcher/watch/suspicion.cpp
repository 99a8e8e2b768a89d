#include "launcher/watch/suspicion.hpp"

namespace ddprun::launcher {
namespace {

/// A loop's body has at most this many Python states that come back (one per line); more, and it computes.
constexpr size_t kMaxPythonStates = 64;

double secondsBetween(SteadyTime from, SteadyTime to) { return std::chrono::duration<double>(to - from).count(); }

}  // namespace

void SuspicionState::recordStacks(size_t local, const MainThread& thread, SteadyTime now) {
  Look& look = looks[local];
  // A spin shows as the same place look after look, in one suspicion.
  if (thread.position.empty() || thread.position != look.thread.position) look.samePositionSince = now;
  const bool firstLook = look.at == SteadyTime{};
  if (!firstLook && thread.place != look.thread.place) look.placeEnteredAt = now;
  look.thread = thread;
  look.at = now;
}

bool SuspicionState::wantsPython(size_t local, SteadyTime now, std::chrono::milliseconds every) const {
  const auto found = looks.find(local);
  if (found == looks.end()) return false;
  const MainThread& thread = found->second.thread;
  if (thread.place != MainThreadPlace::kOther || thread.computes || !thread.runsPython) return false;
  return found->second.pythonReadAt == SteadyTime{} || now - found->second.pythonReadAt >= every;
}

bool SuspicionState::recordPython(size_t local, const PythonPosition& position, SteadyTime at) {
  const auto found = looks.find(local);
  if (found == looks.end()) return false;
  Look& look = found->second;
  const bool firstUnreadable = position.status == PythonPosition::Status::kUnreadable &&
                               look.python.status != PythonPosition::Status::kUnreadable;
  look.pythonReadAt = at;
  PythonPlace& python = look.python;
  python.status = position.status;
  python.why = position.why;
  python.where = position.where();
  python.backwardJump = position.backwardJump;
  // A loop that changes nothing comes back to the states it was in (one per line of its body); a read that finds a
  // new one (or none) starts the count again.
  if (position.status != PythonPosition::Status::kRead) {
    look.pythonStates.clear();
    look.pythonInstructions.clear();
    python.sameReads = 0;
  } else if (look.pythonStates.insert(position.state).second) {
    if (look.pythonStates.size() > kMaxPythonStates) {
      look.pythonStates = {position.state};
      look.pythonInstructions.clear();
    }
    look.pythonSameSince = at;
    python.sameReads = 0;
  } else {
    ++python.sameReads;
  }
  if (position.status == PythonPosition::Status::kRead) look.pythonInstructions.insert(position.instruction);
  python.instructions = look.pythonInstructions.size();
  return firstUnreadable;
}

void SuspicionState::fill(size_t local, double timeout, SteadyTime now, RankEvidence& rank) const {
  const auto found = looks.find(local);
  if (found == looks.end() || secondsBetween(found->second.at, now) >= timeout) return;
  const Look& look = found->second;
  rank.mainThread = look.thread;
  rank.samePositionSeconds = secondsBetween(look.samePositionSince, now);
  if (look.placeEnteredAt) rank.inPlaceSeconds = secondsBetween(*look.placeEnteredAt, now);
  rank.python = look.python;
  // Measured to the last read, not to now: what was not read is not known to be the same.
  if (!look.pythonStates.empty()) rank.python.sameSeconds = secondsBetween(look.pythonSameSince, look.pythonReadAt);
}

}  // namespace ddprun::launcher
