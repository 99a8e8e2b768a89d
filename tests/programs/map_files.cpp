// Maps each file it is given (read-only, from offset 0) and, after --unlink, removes the files that follow once they
// are mapped; prints "ready" and waits to be killed. A process whose /proc/PID/maps names files a test chose: the
// Python position reader's hostile cases (tests/evidence_bounds_test.cpp).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  bool unlinkAfter = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--unlink") == 0) {
      unlinkAfter = true;
      continue;
    }
    const int fd = ::open(argv[i], O_RDONLY);
    struct stat info {};
    if (fd < 0 || ::fstat(fd, &info) != 0) {
      std::perror(argv[i]);
      return 1;
    }
    const size_t length = info.st_size > 0 ? static_cast<size_t>(info.st_size) : 4096;
    if (::mmap(nullptr, length, PROT_READ, MAP_PRIVATE, fd, 0) == MAP_FAILED) {
      std::perror("mmap");
      return 1;
    }
    ::close(fd);
    if (unlinkAfter) ::unlink(argv[i]);
  }
  std::puts("ready");
  std::fflush(stdout);
  for (;;) ::pause();
}
