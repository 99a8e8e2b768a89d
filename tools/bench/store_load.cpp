// store_load: drives a TCPStore server with N stock LibTorch c10d::TCPStore clients (one thread each) for a
// fixed time and prints operations per second as one JSON line. Used by tools/bench/store_vs_tcpstore.sh to
// compare ddprun-store with PyTorch's own TCPStore server under the same load.
// Usage: store_load HOST PORT CLIENTS SECONDS OP   (OP: add | setget)
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <atomic>
#include <chrono>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 6) {
    std::cerr << "usage: store_load HOST PORT CLIENTS SECONDS add|setget\n";
    return 2;
  }
  const std::string host = argv[1], op = argv[5];
  const int port = std::stoi(argv[2]), clients = std::stoi(argv[3]);
  const double seconds = std::stod(argv[4]);
  if (op != "add" && op != "setget") {
    std::cerr << "store_load: OP must be add or setget\n";
    return 2;
  }
  std::atomic<bool> go{false}, stop{false};
  std::atomic<int64_t> total{0};
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      c10d::TCPStoreOptions options;
      options.port = static_cast<uint16_t>(port);
      options.isServer = false;
      options.waitWorkers = false;
      options.timeout = std::chrono::seconds(60);
      c10d::TCPStore store(host, options);
      const std::string key = "bench/" + std::to_string(c);
      const std::vector<uint8_t> value(16, 'x');
      ++ready;
      while (!go) std::this_thread::yield();
      int64_t done = 0;
      while (!stop) {
        if (op == "add") {
          store.add(key, 1);
          done += 1;
        } else {
          store.set(key, value);
          store.get(key);
          done += 2;
        }
      }
      total += done;
    });
  }
  while (ready < clients) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const auto start = std::chrono::steady_clock::now();
  go = true;
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& t : threads) t.join();
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "{\"clients\": " << clients << ", \"op\": \"" << op << "\", \"ops\": " << total.load()
            << ", \"seconds\": " << elapsed << ", \"ops_per_s\": " << total.load() / elapsed << "}" << std::endl;
  return 0;
}
