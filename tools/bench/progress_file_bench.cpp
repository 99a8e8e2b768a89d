// progress_file_bench: the cost of one progress report (common/progress_file.hpp) as the worker makes it
// after every step: ProgressFileWriter::report with a growing step, samples and the phase "train". Prints
// one JSON line: reports, nanoseconds per report (min and median of 5 rounds).
// Usage: progress_file_bench FILE [REPORTS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "common/progress_file.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: progress_file_bench FILE [REPORTS]\n");
    return 2;
  }
  const int64_t reports = argc > 2 ? std::stoll(argv[2]) : 200000;
  ddprun::ProgressFileWriter writer(argv[1]);
  std::vector<double> perReport;
  for (int round = 0; round < 5; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (int64_t step = 0; step < reports; ++step) writer.report({step, step * 64, "train", std::nullopt, {}});
    perReport.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() /
                        static_cast<double>(reports));
  }
  std::sort(perReport.begin(), perReport.end());
  std::printf("{\"reports\": %lld, \"ns_per_report_min\": %.0f, \"ns_per_report_median\": %.0f}\n",
              static_cast<long long>(reports), perReport.front(), perReport[perReport.size() / 2]);
  return 0;
}
