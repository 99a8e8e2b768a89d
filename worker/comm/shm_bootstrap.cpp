#include "worker/comm/shm_bootstrap.hpp"

#include <unistd.h>

#include <climits>
#include <cstdio>
#include <sstream>

#include "common/env.hpp"
#include "common/error.hpp"
#include "common/shm_names.hpp"
#include "worker/comm/c10d_communicator.hpp"
#include "worker/comm/shm_communicator.hpp"
#include "worker/comm/store_bootstrap.hpp"

namespace ddprun::worker {
namespace {

std::string text(const std::vector<uint8_t>& bytes) { return std::string(bytes.begin(), bytes.end()); }
std::vector<uint8_t> bytes(const std::string& text) { return std::vector<uint8_t>(text.begin(), text.end()); }

Topology discoverTopology(c10d::Store& store, const ShmMember& member) {
  if (member.allOnOneNode)
    return Topology::fromNodeKeys(std::vector<std::string>(static_cast<size_t>(member.worldSize), ""));
  store.set("node/" + std::to_string(member.rank), bytes(member.nodeKey));
  std::vector<std::string> keys;
  for (int r = 0; r < member.worldSize; ++r) keys.push_back(text(store.get("node/" + std::to_string(r))));
  return Topology::fromNodeKeys(keys);
}

uint64_t randomNonce() { return std::stoull(randomHex128().substr(0, 16), nullptr, 16); }

/// Makes (node leader) or opens (the others) this node's segment and attaches to it.
std::unique_ptr<ShmGroup> joinNodeGroup(c10d::Store& store, const ShmMember& member, const Topology& topology) {
  const int node = topology.nodeOf[static_cast<size_t>(member.rank)];
  const std::vector<int>& ranks = topology.nodes[static_cast<size_t>(node)];
  const int local = topology.localIndex(member.rank);
  const std::string key = "segment/" + std::to_string(node);
  const size_t size = ShmGroup::segmentBytes(static_cast<int>(ranks.size()), member.options.slotBytes);
  std::unique_ptr<ShmGroup> group;
  if (local == 0) {
    const uint64_t nonce = randomNonce();
    ShmSegment segment = ShmSegment::create(shmSegmentName(member.runId, member.attempt, randomHex128()), size);
    const std::string announcement = segment.name() + " " + std::to_string(size) + " " + std::to_string(nonce);
    group = std::make_unique<ShmGroup>(std::move(segment), 0, ranks, nonce, member.options);
    store.set(key, bytes(announcement));
  } else {
    std::istringstream announcement(text(store.get(key)));
    std::string name;
    size_t announcedSize = 0;
    uint64_t nonce = 0;
    if (!(announcement >> name >> announcedSize >> nonce) || announcedSize != size) {
      throw Error("backend shm: the store announces a segment that does not fit this group: '" + announcement.str() +
                  "'");
    }
    group = std::make_unique<ShmGroup>(ShmSegment::open(name, size), local, ranks, nonce, member.options);
  }
  group->attach();
  return group;
}

std::string hostName() {
  char name[HOST_NAME_MAX + 1] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

}  // namespace

std::unique_ptr<Communicator> formShmCommunicator(const c10::intrusive_ptr<c10d::Store>& store,
                                                  const ShmMember& member) {
  const auto shmStore = prefixed("shm", store);
  Topology topology = discoverTopology(*shmStore, member);
  if (member.glooIfOneRankPerNode && topology.oneRankPerNode() && member.worldSize > 1) {
    return makeGlooCommunicator({store, member.rank, member.worldSize, member.masterAddr, member.options.timeout});
  }
  std::unique_ptr<ShmGroup> local = joinNodeGroup(*shmStore, member, topology);
  std::unique_ptr<Communicator> leaders;
  const int node = topology.nodeOf[static_cast<size_t>(member.rank)];
  if (topology.nodes.size() > 1 && topology.localIndex(member.rank) == 0) {
    leaders = makeGlooCommunicator({prefixed("leaders", shmStore), node, static_cast<int>(topology.nodes.size()),
                                    member.masterAddr, member.options.timeout});
  }
  return std::make_unique<ShmCommunicator>(member.rank, std::move(topology), std::move(local), std::move(leaders));
}

std::unique_ptr<Communicator> makeShmCommunicator(const DistEnv& env, const Placement& placement,
                                                  std::chrono::milliseconds timeout) {
  ShmMember member;
  member.rank = env.rank;
  member.worldSize = env.worldSize;
  member.nodeKey = env.groupRank >= 0 ? "group rank " + std::to_string(env.groupRank) : "host " + hostName();
  member.allOnOneNode = env.localWorldSize == env.worldSize;
  member.glooIfOneRankPerNode = placement.autoBackend;
  // ddprun's launch token when there is one: its clean-up then finds exactly this launch's segments.
  member.runId = getEnv(kLaunchTokenEnv).value_or(env.runId);
  member.attempt = env.restartCount;
  member.masterAddr = env.masterAddr;
  member.options.timeout = timeout;
  // A tuning knob for machines where peers arrive further apart (or closer) than the default spin covers.
  const int64_t spinUs = getEnvInt("DDPRUN_SHM_SPIN_US", member.options.spin.count());
  if (spinUs < 0 || spinUs > 10'000'000) {
    throw ConfigError("DDPRUN_SHM_SPIN_US=" + std::to_string(spinUs) +
                      " is not a spin time in 0..10000000 microseconds");
  }
  member.options.spin = std::chrono::microseconds(spinUs);
  return formShmCommunicator(connectStore(env, timeout), member);
}

}  // namespace ddprun::worker
