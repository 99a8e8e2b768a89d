// A program that CPython's own symbols would take for CPython 3.12 (built as "python3.12", it exports _PyRuntime and
// Py_Version as libpython does) and that is none: what the Python position reader must call unreadable, not guess at
// (tests/evidence_bounds_test.cpp). Prints "ready" and waits to be killed.
#include <unistd.h>

#include <cstdio>

extern "C" {
// extern: a const at namespace scope would otherwise have internal linkage and no dynamic symbol.
__attribute__((visibility("default"), used)) extern const unsigned long Py_Version;
__attribute__((visibility("default"), used)) char _PyRuntime[4096];
}
const unsigned long Py_Version = 0x030C00F0UL;  // 3.12.0 final

int main() {
  std::puts("ready");
  std::fflush(stdout);
  for (;;) ::pause();
}
