// A shared library that exports its own std::filesystem::remove_all, as a pip torch's libtorch.so exports copies of
// libstdc++'s std::filesystem (pytorch/pytorch#133437; torch 2.11's crashes). link_order_test links
// tests/programs/remove_all_probe.cpp against it twice: through ddprun_link_stdcxx_first (CMakeLists.txt), where
// libstdc++'s must be the one called, and plainly, where this one is, which shows the test can fail.
#include <unistd.h>

#include <cstdint>
#include <filesystem>

/// Says it was called and ends the process with exit code 42.
std::uintmax_t std::filesystem::remove_all(const std::filesystem::path& /*unused*/) {
  static constexpr char kMessage[] = "stdcxx_exporter: its own std::filesystem::remove_all was called\n";
  [[maybe_unused]] const auto written = ::write(2, kMessage, sizeof kMessage - 1);
  ::_exit(42);
}
