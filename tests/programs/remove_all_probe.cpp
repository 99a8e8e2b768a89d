// Calls std::filesystem::remove_all on a directory it made; exits 0 when libstdc++'s removed it. Linked against
// tests/programs/stdcxx_exporter.cpp by link_order_test (tests/link_order_test.sh says why).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

int main() {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("ddprun-remove-all-probe-" + std::to_string(::getpid()));
  fs::create_directories(dir / "a" / "b");
  const std::uintmax_t removed = fs::remove_all(dir);
  std::printf("libstdc++'s remove_all removed %ju entries\n", removed);
  return fs::exists(dir) ? 1 : 0;
}
