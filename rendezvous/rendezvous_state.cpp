#include "rendezvous/rendezvous_state.hpp"

#include <nlohmann/json.hpp>

#include "rendezvous/rendezvous_backend.hpp"

namespace ddprun::rendezvous {
using nlohmann::json;

namespace {

json encodeNodes(const std::map<std::string, NodeRecord>& nodes) {
  json out = json::object();
  for (const auto& [id, n] : nodes) {
    out[id] = {{"addr", n.addr},
               {"nproc", n.nproc},
               {"store_addr", n.storeAddr},
               {"store_port", n.storePort},
               {"rank", n.rank}};
  }
  return out;
}

std::map<std::string, NodeRecord> decodeNodes(const json& in) {
  std::map<std::string, NodeRecord> nodes;
  for (const auto& [id, n] : in.items()) {
    NodeRecord r;
    r.addr = n.at("addr").get<std::string>();
    r.nproc = n.at("nproc").get<int>();
    r.storeAddr = n.at("store_addr").get<std::string>();
    r.storePort = n.at("store_port").get<int>();
    r.rank = n.at("rank").get<int>();
    nodes[id] = r;
  }
  return nodes;
}

NodeRecord recordOf(const NodeDescriptor& self) {
  return NodeRecord{self.addr, self.nproc, self.storeAddr, self.storePort, -1};
}

/// _remove_participant_epilogue: what losing a participant does to the round.
void afterParticipantRemoved(RendezvousState& state, const RoundLimits& limits) {
  if (state.complete) {
    if (state.participants.empty()) {
      state.complete = false;
      state.round += 1;
      state.finished.clear();
    }
  } else if (static_cast<int>(state.participants.size()) < limits.minNodes) {
    state.deadlineMs.reset();
  }
}

}  // namespace

std::string encodeState(const RendezvousState& s) {
  json j = {{"round", s.round},
            {"complete", s.complete},
            {"closed", s.closed},
            {"participants", encodeNodes(s.participants)},
            {"wait_list", encodeNodes(s.waitList)},
            {"finished", s.finished},
            {"writes", s.writes}};
  j["deadline_ms"] = s.deadlineMs ? json(*s.deadlineMs) : json(nullptr);
  return j.dump();
}

RendezvousState decodeState(const std::string& text) {
  try {
    const json j = json::parse(text);
    RendezvousState s;
    s.round = j.at("round").get<int64_t>();
    s.complete = j.at("complete").get<bool>();
    s.closed = j.at("closed").get<bool>();
    if (!j.at("deadline_ms").is_null()) s.deadlineMs = j.at("deadline_ms").get<int64_t>();
    s.participants = decodeNodes(j.at("participants"));
    s.waitList = decodeNodes(j.at("wait_list"));
    s.finished = j.at("finished").get<std::set<std::string>>();
    s.writes = j.at("writes").get<int64_t>();
    return s;
  } catch (const json::exception& e) {
    throw RendezvousBackendError("the rendezvous state is corrupt (not ddprun's rendezvous JSON: " +
                                 std::string(e.what()) + "); is another program using this run id?");
  }
}

void markComplete(RendezvousState& state) {
  state.complete = true;
  state.deadlineMs.reset();
  int rank = 0;
  for (auto& [id, node] : state.participants) node.rank = rank++;  // std::map: sorted by node id
}

void addParticipant(RendezvousState& state, const std::string& id, const NodeDescriptor& self,
                    const RoundLimits& limits, int64_t nowMs) {
  state.waitList.erase(id);
  state.participants[id] = recordOf(self);
  const int count = static_cast<int>(state.participants.size());
  if (count == limits.minNodes) state.deadlineMs = nowMs + limits.lastCallMs;
  if (count == limits.maxNodes) markComplete(state);
}

void removeParticipant(RendezvousState& state, const std::string& id, const RoundLimits& limits) {
  if (state.participants.erase(id) == 0) return;
  afterParticipantRemoved(state, limits);
}

bool removeDeadNodes(RendezvousState& state, const std::vector<std::string>& dead, const RoundLimits& limits) {
  bool participantRemoved = false, changed = false;
  for (const auto& id : dead) {
    if (state.finished.count(id)) continue;  // a finished node stops heartbeating on purpose
    if (state.participants.erase(id)) participantRemoved = changed = true;
    if (state.waitList.erase(id)) changed = true;
  }
  if (participantRemoved) afterParticipantRemoved(state, limits);
  return changed;
}

JoinAction nextJoinAction(const RendezvousState& state, const std::string& id, const RoundLimits& limits,
                          int64_t nowMs) {
  const bool participant = state.participants.count(id) > 0;
  const int count = static_cast<int>(state.participants.size());
  if (state.complete) {
    if (participant) return JoinAction::kFinish;
    // Not in this round: queue for the next one if it will have room (the running nodes see the queue).
    if (count < limits.maxNodes && !state.waitList.count(id)) return JoinAction::kAddToWaitList;
    return JoinAction::kWait;
  }
  if (!participant) return JoinAction::kAddToParticipants;
  if (count >= limits.minNodes && state.deadlineMs && *state.deadlineMs <= nowMs) return JoinAction::kMarkComplete;
  return JoinAction::kWait;
}

RoundAssignment assignmentOf(const RendezvousState& state, const std::string& id) {
  auto self = state.participants.find(id);
  if (!state.complete || self == state.participants.end()) {
    throw Error("node " + id + " is not a participant of a complete round");
  }
  RoundAssignment a;
  a.round = state.round;
  a.groupRank = self->second.rank;
  a.groupWorldSize = static_cast<int>(state.participants.size());
  a.worldSize = 0;
  for (const auto& [otherId, node] : state.participants) {
    if (node.rank < a.groupRank) a.rankOffset += node.nproc;
    if (node.rank == 0) {
      a.masterAddr = node.storeAddr;
      a.masterPort = node.storePort;
    }
    a.worldSize += node.nproc;
  }
  return a;
}

}  // namespace ddprun::rendezvous
