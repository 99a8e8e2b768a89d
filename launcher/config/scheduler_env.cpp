#include "launcher/config/scheduler_env.hpp"

#include <algorithm>
#include <cctype>
#include <climits>
#include <initializer_list>
#include <utility>
#include <vector>

#include "common/env.hpp"
#include "common/error.hpp"

namespace ddprun::launcher {
namespace {

/// What a host-list error names: the variable and its whole text, so the one line is enough to act on.
struct ListContext {
  const std::string& variable;
  const std::string& text;

  [[noreturn]] void fail(const std::string& why) const {
    throw ConfigError(variable + ": malformed host list '" + text + "': " + why);
  }
};

bool isDigits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
}

/// a < b as numbers, for digit strings of any length (zero padding and all).
bool lessByValue(const std::string& a, const std::string& b) {
  auto strip = [](const std::string& s) {
    const size_t first = s.find_first_not_of('0');
    return first == std::string::npos ? std::string("0") : s.substr(first);
  };
  const std::string x = strip(a), y = strip(b);
  return x.size() != y.size() ? x.size() < y.size() : x < y;
}

std::vector<std::string> splitOn(const std::string& text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t pos; (pos = text.find(separator, start)) != std::string::npos; start = pos + 1) {
    parts.push_back(text.substr(start, pos - start));
  }
  parts.push_back(text.substr(start));
  return parts;
}

/// Checks the inside of one bracket ("10,20-25", "001-004") and returns its first number as written, so
/// that zero padding survives ("001", not "1"): Slurm pads every host of a range to the width of its bounds.
std::string firstOfRanges(const std::string& ranges, const ListContext& ctx) {
  if (ranges.empty()) ctx.fail("empty []");
  std::string first;
  for (const std::string& range : splitOn(ranges, ',')) {
    const size_t dash = range.find('-');
    const std::string low = range.substr(0, dash);
    const std::string high = dash == std::string::npos ? low : range.substr(dash + 1);
    if (!isDigits(low) || !isDigits(high)) ctx.fail("'" + range + "' is not a number or a range N-M");
    if (lessByValue(high, low)) ctx.fail("range '" + range + "' runs backwards");
    if (first.empty()) first = low;
  }
  return first;
}

/// Splits a host list at the commas outside brackets, checking that brackets pair up and do not nest.
std::vector<std::string> splitEntries(const std::string& list, const ListContext& ctx) {
  std::vector<std::string> entries;
  std::string current;
  bool inBracket = false;
  for (char c : list) {
    if (std::isspace(static_cast<unsigned char>(c))) ctx.fail("whitespace inside");
    if (c == '[') {
      if (inBracket) ctx.fail("nested '['");
      inBracket = true;
    } else if (c == ']') {
      if (!inBracket) ctx.fail("']' without '['");
      inBracket = false;
    } else if (c == ',' && !inBracket) {
      entries.push_back(std::move(current));
      current.clear();
      continue;
    }
    current += c;
  }
  if (inBracket) ctx.fail("unbalanced '['");
  entries.push_back(std::move(current));
  return entries;
}

/// The first host of one entry: each bracket replaced by its first number ("rack[1-2]-n[3-4]" -> "rack1-n3",
/// the first element of the cartesian product Slurm expands it to). Checks every bracket of the entry.
std::string firstHostOfEntry(const std::string& entry, const ListContext& ctx) {
  if (entry.empty()) ctx.fail("empty entry");
  std::string host;
  size_t pos = 0;
  while (pos < entry.size()) {
    const size_t open = entry.find('[', pos);
    host += entry.substr(pos, open - pos);
    if (open == std::string::npos) break;
    const size_t close = entry.find(']', open);  // present: splitEntries checked the pairing
    host += firstOfRanges(entry.substr(open + 1, close - open - 1), ctx);
    pos = close + 1;
  }
  return host;
}

std::string trimmed(const std::string& s) {
  const char* space = " \t\r\n";
  const size_t first = s.find_first_not_of(space);
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(space) - first + 1);
}

/// The first of `names` that is set to a non-empty value, with its name (errors name the variable used).
std::optional<std::pair<std::string, std::string>> firstSet(const EnvLookup& getEnv,
                                                            std::initializer_list<const char*> names) {
  for (const char* name : names) {
    auto value = getEnv(name);
    if (value && !value->empty()) return std::make_pair(std::string(name), *value);
  }
  return std::nullopt;
}

/// A whole number from variable `name` within [min, max]; ConfigError naming the variable otherwise.
int parseVariable(const std::pair<std::string, std::string>& variable, int64_t min, int64_t max) {
  const auto& [name, text] = variable;
  const int64_t value = parseInt(text, "environment variable " + name);
  if (value < min || value > max) {
    throw ConfigError("environment variable " + name + ": expected " + std::to_string(min) + ".." +
                      std::to_string(max) + ", got '" + text + "'");
  }
  return static_cast<int>(value);
}

}  // namespace

std::string firstHostOfNodelist(const std::string& nodelist, const std::string& variable) {
  const std::string text = trimmed(nodelist);
  const ListContext ctx{variable, nodelist};
  if (text.empty()) ctx.fail("empty");
  const std::vector<std::string> entries = splitEntries(text, ctx);
  std::string first;
  for (const std::string& entry : entries) {
    std::string host = firstHostOfEntry(entry, ctx);
    if (first.empty()) first = std::move(host);
  }
  return first;
}

SchedulerDefaults slurmDefaults(const EnvLookup& getEnv) {
  SchedulerDefaults defaults;
  const auto jobId = firstSet(getEnv, {"SLURM_JOB_ID", "SLURM_JOBID"});
  if (!jobId) return defaults;
  defaults.source = "Slurm";
  defaults.rdzvId = jobId->second;

  const auto nnodesVar = firstSet(getEnv, {"SLURM_NNODES", "SLURM_JOB_NUM_NODES"});
  if (nnodesVar) defaults.nnodes = std::to_string(parseVariable(*nnodesVar, 1, INT_MAX));
  if (auto var = firstSet(getEnv, {"SLURM_NODEID"})) {
    defaults.nodeRank = parseVariable(*var, 0, INT_MAX);
    // A node id past the node count would make every node wait for a peer that never comes; say so now.
    if (defaults.nnodes && *defaults.nodeRank >= std::stoi(*defaults.nnodes)) {
      throw ConfigError("environment variable SLURM_NODEID: " + var->second + " is not below " + nnodesVar->first +
                        "=" + nnodesVar->second);
    }
  }
  if (auto var = firstSet(getEnv, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"})) {
    defaults.rdzvEndpointHost = firstHostOfNodelist(var->second, var->first);
  }
  return defaults;
}

bool signalReachedTheWholeStep(const std::string& senderName) {
  // slurmstepd renames its command line ("slurmstepd: [42.0]") but not its comm.
  return senderName.rfind("slurmstepd", 0) == 0;
}

}  // namespace ddprun::launcher
