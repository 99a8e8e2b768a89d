#include "rendezvous/round_keys.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "rendezvous/rendezvous_backend.hpp"

namespace ddprun::rendezvous {
using nlohmann::json;

namespace round_keys {
namespace {
std::string in(int64_t round, const std::string& key) { return "r" + std::to_string(round) + "/" + key; }
}  // namespace

std::string prefix(const std::string& runId) { return "/ddprun.rdzv." + runId; }
std::string closed() { return "closed"; }
std::string roundHint() { return "round"; }
std::string storeId() { return "store_id"; }
std::string alive(const std::string& nodeId) { return "alive/" + nodeId; }
std::string gone(const std::string& nodeId) { return "gone/" + nodeId; }
std::string present(const std::string& nodeId) { return "present/" + nodeId; }
std::string tickets(int64_t round) { return in(round, "tickets"); }
std::string node(int64_t round, int64_t ticket) { return in(round, "node/" + std::to_string(ticket)); }
std::string lastCall(int64_t round) { return in(round, "last_call"); }
std::string closing(int64_t round) { return in(round, "closing"); }
std::string size(int64_t round) { return in(round, "size"); }
std::string assignment(int64_t round, int64_t ticket) { return in(round, "assign/" + std::to_string(ticket)); }
std::string ended(int64_t round) { return in(round, "ended"); }
std::string waiting(int64_t round) { return in(round, "waiting"); }
std::string done(int64_t round, int64_t ticket) { return in(round, "done/" + std::to_string(ticket)); }
std::string finished(int64_t round) { return in(round, "finished"); }
std::string allFinished(int64_t round) { return in(round, "all_finished"); }
}  // namespace round_keys

namespace {

constexpr const char* kEndKinds[] = {"left", "dead", "waiting", "other"};

template <typename Parse>
auto parsed(const std::string& what, const std::string& text, Parse&& parse) -> decltype(parse(json())) {
  try {
    return parse(json::parse(text));
  } catch (const json::exception& e) {
    throw RendezvousBackendError("the rendezvous " + what + " is corrupt (not ddprun's rendezvous JSON: " +
                                 std::string(e.what()) + "); is another program using this run id?");
  }
}

}  // namespace

std::string encodeRoundEnd(RoundEnd kind, const std::string& text) {
  return std::string(kEndKinds[static_cast<int>(kind)]) + " " + text;
}

std::pair<RoundEnd, std::string> decodeRoundEnd(const std::string& value) {
  const auto space = value.find(' ');
  const std::string kind = value.substr(0, space);
  for (int i = 0; i < 4; ++i) {
    if (kind == kEndKinds[i] && space != std::string::npos) return {static_cast<RoundEnd>(i), value.substr(space + 1)};
  }
  return {RoundEnd::kOther, value};
}

std::string encodeRecord(const NodeDescriptor& n) {
  return json{
      {"id", n.id}, {"addr", n.addr}, {"nproc", n.nproc}, {"store_addr", n.storeAddr}, {"store_port", n.storePort}}
      .dump();
}

NodeDescriptor decodeRecord(const std::string& text) {
  return parsed("node record", text, [](const json& j) {
    NodeDescriptor n;
    n.id = j.at("id").get<std::string>();
    n.addr = j.at("addr").get<std::string>();
    n.nproc = j.at("nproc").get<int>();
    n.storeAddr = j.at("store_addr").get<std::string>();
    n.storePort = j.at("store_port").get<int>();
    return n;
  });
}

std::string encodeAssignment(const TicketAssignment& a) {
  const RoundAssignment& p = a.place;
  return json{{"round", p.round},
              {"group_rank", p.groupRank},
              {"group_world_size", p.groupWorldSize},
              {"rank_offset", p.rankOffset},
              {"world_size", p.worldSize},
              {"master_addr", p.masterAddr},
              {"master_port", p.masterPort},
              {"watch_id", a.watchId},
              {"watch_ticket", a.watchTicket}}
      .dump();
}

TicketAssignment decodeAssignment(const std::string& text) {
  return parsed("assignment", text, [](const json& j) {
    TicketAssignment a;
    a.place.round = j.at("round").get<int64_t>();
    a.place.groupRank = j.at("group_rank").get<int>();
    a.place.groupWorldSize = j.at("group_world_size").get<int>();
    a.place.rankOffset = j.at("rank_offset").get<int>();
    a.place.worldSize = j.at("world_size").get<int>();
    a.place.masterAddr = j.at("master_addr").get<std::string>();
    a.place.masterPort = j.at("master_port").get<int>();
    a.watchId = j.at("watch_id").get<std::string>();
    a.watchTicket = j.at("watch_ticket").get<int64_t>();
    return a;
  });
}

std::vector<TicketAssignment> assignRanks(int64_t round, const std::vector<TicketRecord>& records) {
  if (records.empty()) throw Error("a round needs at least one node");
  std::vector<size_t> byId(records.size());
  for (size_t i = 0; i < byId.size(); ++i) byId[i] = i;
  std::sort(byId.begin(), byId.end(), [&](size_t a, size_t b) { return records[a].node.id < records[b].node.id; });
  for (size_t r = 1; r < byId.size(); ++r) {
    if (records[byId[r]].node.id == records[byId[r - 1]].node.id) {
      throw Error("node " + records[byId[r]].node.id + " holds two tickets in round " + std::to_string(round));
    }
  }
  int worldSize = 0;
  for (const auto& record : records) worldSize += record.node.nproc;
  const NodeDescriptor& first = records[byId[0]].node;
  std::vector<TicketAssignment> out(records.size());
  int offset = 0;
  for (size_t rank = 0; rank < byId.size(); ++rank) {
    TicketAssignment& a = out[byId[rank]];
    a.place.round = round;
    a.place.groupRank = static_cast<int>(rank);
    a.place.groupWorldSize = static_cast<int>(records.size());
    a.place.rankOffset = offset;
    a.place.worldSize = worldSize;
    a.place.masterAddr = first.storeAddr;
    a.place.masterPort = first.storePort;
    if (byId.size() > 1) {
      const TicketRecord& next = records[byId[(rank + 1) % byId.size()]];
      a.watchId = next.node.id;
      a.watchTicket = next.ticket;
    }
    offset += records[byId[rank]].node.nproc;
  }
  return out;
}

std::optional<int64_t> closedSize(const std::string& sizeValue) {
  const auto space = sizeValue.find(' ');
  if (space == std::string::npos || space == 0) return std::nullopt;
  try {
    size_t used = 0;
    const int64_t n = std::stoll(sizeValue.substr(0, space), &used);
    if (used != space || n < 1) return std::nullopt;
    return n;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace ddprun::rendezvous
