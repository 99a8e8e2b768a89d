// allreduce_bench: times one in-place SUM allreduce of a float32 tensor through the worker's own
// communicators (the same code the worker trains with), run as one rank of a job under tools/launch-local.sh.
// Rank 0 prints one JSON line: backend, ranks, elements, iterations, median/p99/min microseconds per call.
// Usage: allreduce_bench BACKEND ELEMENTS ITERATIONS   (BACKEND: gloo | shm; 203530 floats = the MLP's 0.8 MB)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "worker/comm/devices.hpp"
#include "worker/comm/dist_env.hpp"
#include "worker/comm/make_communicator.hpp"

int main(int argc, char** argv) {
  using namespace ddprun::worker;
  if (argc != 4) {
    std::fprintf(stderr, "usage: allreduce_bench gloo|shm ELEMENTS ITERATIONS\n");
    return 2;
  }
  const DistEnv env = DistEnv::fromEnvironment();
  const Placement placement = placeRank(env, parseBackendKind(argv[1]), DeviceKind::kCpu);
  auto comm = makeCommunicator(env, placement, std::chrono::seconds(60));
  const int64_t elements = std::stoll(argv[2]);
  const int iterations = std::stoi(argv[3]);
  torch::Tensor tensor = torch::full({elements}, 1.0f + comm->rank());
  for (int i = 0; i < std::max(10, iterations / 10); ++i) comm->allreduceSum(tensor);  // warm-up: connections, pages
  std::vector<double> micros;
  for (int i = 0; i < iterations; ++i) {
    const auto start = std::chrono::steady_clock::now();
    comm->allreduceSum(tensor);
    micros.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  comm->barrier();
  if (comm->rank() == 0) {
    std::sort(micros.begin(), micros.end());
    auto at = [&](double q) { return micros[std::min(micros.size() - 1, static_cast<size_t>(q * micros.size()))]; };
    std::printf(
        "{\"backend\": \"%s\", \"ranks\": %d, \"elements\": %lld, \"iterations\": %d, \"median_us\": %.1f, "
        "\"p99_us\": %.1f, \"min_us\": %.1f}\n",
        comm->backendName().c_str(), comm->worldSize(), static_cast<long long>(elements), iterations, at(0.5), at(0.99),
        micros.front());
  }
  return 0;
}
