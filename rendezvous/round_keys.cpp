#include "rendezvous/round_keys.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/log_text.hpp"
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
  } catch (const RendezvousValueError& e) {
    throw RendezvousValueError("the rendezvous " + what + " is not one ddprun writes: " + e.what());
  } catch (const json::exception& e) {
    throw RendezvousValueError("the rendezvous " + what + " is not ddprun's rendezvous JSON (" +
                               printable(e.what(), 120) + "); is another program using this run id?");
  }
}

/// Field `name` of `j` as an integer in lo..hi (JSON numbers past int64 or fractions are refused, not wrapped).
int64_t integerIn(const json& j, const char* name, int64_t lo, int64_t hi) {
  const json& v = j.at(name);
  if (!v.is_number_integer()) throw RendezvousValueError(std::string(name) + " is not an integer");
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi)) {
    throw RendezvousValueError(std::string(name) + " " + v.dump() + " is not in " + std::to_string(lo) + ".." +
                               std::to_string(hi));
  }
  const int64_t n = v.get<int64_t>();
  if (n < lo || n > hi) {
    throw RendezvousValueError(std::string(name) + " " + std::to_string(n) + " is not in " + std::to_string(lo) + ".." +
                               std::to_string(hi));
  }
  return n;
}

/// Field `name` of `j` as printable ASCII (empty allowed only when `mayBeEmpty`).
std::string nameIn(const json& j, const char* name, bool mayBeEmpty = false) {
  const std::string v = j.at(name).get<std::string>();
  if ((v.empty() && mayBeEmpty) || isPrintableName(v)) return v;
  throw RendezvousValueError(std::string(name) + " '" + printable(v, 80) + "' is not a printable name");
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
    n.id = nameIn(j, "id");
    n.addr = nameIn(j, "addr");
    n.nproc = static_cast<int>(integerIn(j, "nproc", 1, kMaxWorldSize));
    n.storeAddr = nameIn(j, "store_addr");
    n.storePort = static_cast<int>(integerIn(j, "store_port", 1, 65535));
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

TicketAssignment decodeAssignment(const std::string& text, int64_t round, int nproc, int maxNodes) {
  return parsed("assignment", text, [&](const json& j) {
    TicketAssignment a;
    RoundAssignment& p = a.place;
    p.round = integerIn(j, "round", round, round);
    p.groupWorldSize = static_cast<int>(integerIn(j, "group_world_size", 1, maxNodes));
    p.groupRank = static_cast<int>(integerIn(j, "group_rank", 0, p.groupWorldSize - 1));
    p.worldSize = static_cast<int>(integerIn(j, "world_size", nproc, kMaxWorldSize));
    p.rankOffset = static_cast<int>(integerIn(j, "rank_offset", 0, p.worldSize - nproc));
    p.masterAddr = nameIn(j, "master_addr");
    p.masterPort = static_cast<int>(integerIn(j, "master_port", 1, 65535));
    a.watchId = nameIn(j, "watch_id", true);
    a.watchTicket = a.watchId.empty() ? 0 : integerIn(j, "watch_ticket", 1, maxNodes);
    return a;
  });
}

std::optional<int64_t> parseRound(const std::string& value) {
  if (value.empty() || value.size() > 10) return std::nullopt;
  int64_t n = 0;
  for (const char c : value) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
  }
  if (n > kMaxRound) return std::nullopt;
  return n;
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
  int64_t total = 0;
  for (const auto& record : records) total += record.node.nproc;
  if (total > kMaxWorldSize) {
    throw Error("round " + std::to_string(round) + " would have a world size of " + std::to_string(total) + ", over " +
                std::to_string(kMaxWorldSize));
  }
  const int worldSize = static_cast<int>(total);
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
    if (used != space || n < 1 || n > kMaxWorldSize) return std::nullopt;
    return n;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace ddprun::rendezvous
