#include "launcher/watch/suspicion.hpp"

namespace ddprun::launcher {
namespace {

/// The Python states remembered in one suspicion: a loop's body comes back to far fewer (a few per line), and a
/// computation that reaches more restarts the set (its reads are new ones all the same).
constexpr size_t kMaxPythonStates = 256;
/// Reads kept: two minutes at two a second, longer than any spin window the rule asks about by default.
constexpr size_t kMaxPythonReads = 240;

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
  // A loop that changes nothing comes back to the states it was in (a few per line of its body); a read that fails
  // starts the count again.
  if (position.status != PythonPosition::Status::kRead) {
    look.pythonStates.clear();
    look.pythonInstructions.clear();
    look.pythonReads.clear();
    return firstUnreadable;
  }
  const bool isNew = look.pythonStates.insert(position.state).second;
  if (look.pythonStates.size() > kMaxPythonStates) look.pythonStates = {position.state};
  look.pythonReads.emplace_back(at, isNew);
  if (look.pythonReads.size() > kMaxPythonReads) look.pythonReads.pop_front();
  look.pythonInstructions.insert(position.instruction);
  python.instructions = look.pythonInstructions.size();
  return firstUnreadable;
}

void SuspicionState::fill(size_t local, double timeout, double spinWindow, SteadyTime now, RankEvidence& rank) const {
  const auto found = looks.find(local);
  if (found == looks.end() || secondsBetween(found->second.at, now) >= timeout) return;
  const Look& look = found->second;
  rank.mainThread = look.thread;
  rank.samePositionSeconds = secondsBetween(look.samePositionSince, now);
  if (look.placeEnteredAt) rank.inPlaceSeconds = secondsBetween(*look.placeEnteredAt, now);
  rank.python = look.python;
  // The reads of the last spin window, measured to the last read, not to now (what was not read is not known); the
  // span reaches back to the read before the window, so reads that cover the whole window span at least it.
  for (auto read = look.pythonReads.rbegin(); read != look.pythonReads.rend(); ++read) {
    rank.python.sameSeconds = secondsBetween(read->first, look.pythonReadAt);
    if (rank.python.sameSeconds > spinWindow) break;
    ++(read->second ? rank.python.newReads : rank.python.sameReads);
  }
}

}  // namespace ddprun::launcher
