// The rendezvous store against stock clients: LibTorch's C++ c10d::TCPStore, Python's
// torch.distributed.TCPStore (python3-torch 1.13), a Gloo process group built through env:// with the
// agent store, and the C++ worker with the agent store.
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <thread>

#include "store/wire_protocol.hpp"
#include "support/child_process.hpp"
#include "support/store_fixture.hpp"

namespace ddprun::store {
namespace {
using namespace std::chrono_literals;

c10::intrusive_ptr<c10d::TCPStore> connect(uint16_t port, std::chrono::milliseconds timeout = 10s) {
  c10d::TCPStoreOptions options;
  options.port = port;
  options.isServer = false;
  options.waitWorkers = false;
  options.timeout = timeout;
  return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
}

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<uint8_t>& v) { return {v.begin(), v.end()}; }

TEST(StoreInterop, LibTorchClientEveryOperation) {
  test::RunningStore store;
  auto client = connect(store.port());
  client->set("k1", bytes("v1"));
  EXPECT_EQ(text(client->get("k1")), "v1");
  EXPECT_EQ(client->add("cnt", 5), 5);
  EXPECT_EQ(client->add("cnt", -2), 3);
  EXPECT_EQ(text(client->compareSet("k1", bytes("v1"), bytes("v2"))), "v2");
  EXPECT_EQ(text(client->compareSet("k1", bytes("zz"), bytes("v3"))), "v2");
  EXPECT_TRUE(client->check({"k1", "cnt"}));
  EXPECT_FALSE(client->check({"k1", "absent"}));
  EXPECT_EQ(client->getNumKeys(), 2);
  EXPECT_TRUE(client->deleteKey("k1"));
  EXPECT_FALSE(client->deleteKey("k1"));
  EXPECT_EQ(client->getNumKeys(), 1);
  client->wait({"cnt"});
}

TEST(StoreInterop, LibTorchClientWaitTimesOutAndAWaitIsWokenByAnotherClient) {
  test::RunningStore store;
  auto client = connect(store.port());
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(client->wait({"never"}, 300ms), c10::Error);
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, 250ms);
  EXPECT_LT(waited, 5s);

  auto waiter = connect(store.port());
  std::thread setter([&] {
    std::this_thread::sleep_for(200ms);
    connect(store.port())->set("late", bytes("x"));
  });
  EXPECT_EQ(text(waiter->get("late")), "x");  // get = wait + get
  setter.join();
}

TEST(StoreInterop, ManyLibTorchClientsAddConcurrently) {
  test::RunningStore store;
  constexpr int kClients = 16, kAdds = 100;
  std::vector<std::thread> threads;
  for (int t = 0; t < kClients; ++t) {
    threads.emplace_back([&] {
      auto client = connect(store.port());
      for (int i = 0; i < kAdds; ++i) client->add("total", 1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(connect(store.port())->add("total", 0), kClients * kAdds);
}

/// ADD on `stored` through `client`: the new value, or "closed" when the server refuses it.
std::string addOnStored(c10d::TCPStore& client, const std::string& key, const std::string& stored) {
  client.set(key, bytes(stored));
  try {
    return std::to_string(client.add(key, 1));
  } catch (const std::exception&) {
    return "closed";
  }
}

TEST(StoreInterop, AddReadsAStoredValueAsLibTorchsOwnServerDoes) {
  // The same values ADDed on LibTorch 1.13's own server (in this process) and on ours: same answers, and the
  // same refusals (the server closes the client's connection).
  const std::vector<std::string> values{" 12", "12abc", "+7", "\t-3 ", "abc", "", "99999999999999999999"};
  c10d::TCPStoreOptions serverOptions;
  serverOptions.port = 0;
  serverOptions.isServer = true;
  serverOptions.waitWorkers = false;
  serverOptions.timeout = 10s;
  auto torchServer = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", serverOptions);
  test::RunningStore ours;
  for (size_t i = 0; i < values.size(); ++i) {
    const std::string key = "n" + std::to_string(i);
    // A fresh client per value: a refusal closes the connection.
    const std::string theirs = addOnStored(*connect(torchServer->getPort()), key, values[i]);
    const std::string mine = addOnStored(*connect(ours.port()), key, values[i]);
    EXPECT_EQ(mine, theirs) << "stored '" << values[i] << "'";
  }
}

// tests/scripts/tcpstore_client_conformance.py, also run by tools/gpu-check.sh with torch 2.x.
TEST(StoreInterop, PythonTcpStoreClientEveryOperation) {
  test::RunningStore store;
  auto result = test::runProcess(
      test::pythonExe(),
      {DDPRUN_SOURCE_DIR "/tests/scripts/tcpstore_client_conformance.py", std::to_string(store.port())}, {}, 60s);
  EXPECT_EQ(result.exitCode, 0) << result.output;
  EXPECT_NE(result.output.find("TCPStore client: OK"), std::string::npos) << result.output;
}

// torch.distributed.init_process_group("gloo", init_method="env://") with TORCHELASTIC_USE_AGENT_STORE=True:
// every rank is a client of our store under /worker/attempt_<n>, exactly as under torchrun.
TEST(StoreInterop, PythonGlooProcessGroupOverTheAgentStore) {
  test::RunningStore store;
  const std::string script = R"(
import torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="env://")
t = torch.full((4,), float(dist.get_rank() + 1))
dist.all_reduce(t)
assert t.tolist() == [3.0] * 4, t
dist.barrier()
print("rank", dist.get_rank(), "allreduce OK")
)";
  std::vector<test::ChildProcess> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back(test::pythonExe(), std::vector<std::string>{"-c", script},
                       std::map<std::string, std::string>{{"RANK", std::to_string(rank)},
                                                          {"WORLD_SIZE", "2"},
                                                          {"MASTER_ADDR", "127.0.0.1"},
                                                          {"MASTER_PORT", std::to_string(store.port())},
                                                          {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                                          {"TORCHELASTIC_RESTART_COUNT", "3"}});
  }
  for (auto& rank : ranks) {
    auto result = rank.wait(60s);
    EXPECT_EQ(result.exitCode, 0) << result.output;
    EXPECT_NE(result.output.find("allreduce OK"), std::string::npos) << result.output;
  }
  // The workers' keys live under the attempt prefix the launcher's restart count selects.
  test::RawClient raw(store.port());
  raw.send(test::Bytes().u8(0).u32(kValidateMagic).u8(17));  // VALIDATE, LIST_KEYS (2.x)
  const int64_t count = raw.readI64();
  int underPrefix = 0;
  std::string all;
  for (int64_t i = 0; i < count; ++i) {
    std::string key = raw.readBytes();
    all += key + " ";
    underPrefix += key.rfind("//worker/attempt_3/default_pg/", 0) == 0;  // c10d prepends "/"
  }
  EXPECT_GT(underPrefix, 0) << "keys: " << all;
}

TEST(StoreInterop, CppWorkerOverTheAgentStore) {
  test::RunningStore store;
  auto results = test::runRanks(
      2, DDPRUN_WORKER_BIN, {"--data-dir", DDPRUN_SOURCE_DIR "/data/mnist", "--max-steps", "5", "--log-every", "5"},
      {{"MASTER_PORT", std::to_string(store.port())}, {"TORCHELASTIC_USE_AGENT_STORE", "True"}}, 120s);
  for (const auto& r : results) EXPECT_EQ(r.exitCode, 0) << r.output;
}

}  // namespace
}  // namespace ddprun::store
