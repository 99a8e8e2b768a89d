#include "worker/comm/shm_segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "common/error.hpp"

namespace ddprun::worker {
namespace {

std::string describe(const std::string& name) { return "shared-memory segment /dev/shm/" + name; }

[[noreturn]] void fail(const std::string& name, const std::string& what, int error) {
  throw Error(describe(name) + ": " + what + ": " + std::strerror(error));
}

/// MAP_POPULATE: the segment's page-table entries are made in one call here instead of one page fault per 4 KiB page
/// at its first touch, which falls into the group's first collectives (a new rank's state exchange, an attempt's
/// first step). On this project's 2-core VM a first touch stays costly even so (the hypervisor's own page tables):
/// the rank replacement benchmark's median went from 27 to 24 ms with it.
void* mapShared(int fd, size_t size) {
  void* data = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  return data == MAP_FAILED ? nullptr : data;
}

}  // namespace

std::string randomHex128() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno != EINTR) throw Error(std::string("getrandom failed: ") + std::strerror(errno));
    if (n > 0) got += static_cast<size_t>(n);
  }
  char hex[33];
  for (size_t i = 0; i < sizeof bytes; ++i) std::snprintf(hex + 2 * i, 3, "%02x", bytes[i]);
  return std::string(hex, 32);
}

ShmSegment::ShmSegment(std::string name, void* data, size_t size, bool owner)
    : name_(std::move(name)), data_(data), size_(size), owner_(owner) {}

ShmSegment ShmSegment::create(const std::string& name, size_t size) {
  const std::string path = "/" + name;
  const int fd = ::shm_open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, S_IRUSR | S_IWUSR);
  if (fd < 0) fail(name, "cannot create it", errno);
  auto removeAndFail = [&](const std::string& what, int error) {
    ::close(fd);
    ::shm_unlink(path.c_str());
    fail(name, what, error);
  };
  if (::fchmod(fd, S_IRUSR | S_IWUSR) != 0) removeAndFail("cannot set its mode to 0600", errno);
  // posix_fallocate returns the error instead of setting errno.
  if (const int error = ::posix_fallocate(fd, 0, static_cast<off_t>(size)); error != 0) {
    removeAndFail("cannot reserve " + std::to_string(size >> 10) + " KiB (is /dev/shm full or too small?)", error);
  }
  void* data = mapShared(fd, size);
  if (data == nullptr) removeAndFail("cannot map it", errno);
  ::close(fd);
  return ShmSegment(name, data, size, true);
}

ShmSegment ShmSegment::open(const std::string& name, size_t size) {
  const std::string path = "/" + name;
  const int fd = ::shm_open(path.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) fail(name, "cannot open it", errno);
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int error = errno;
    ::close(fd);
    fail(name, "cannot stat it", error);
  }
  std::string problem;
  if (info.st_uid != ::geteuid()) {
    problem = "belongs to uid " + std::to_string(info.st_uid) + ", not to this user";
  } else if ((info.st_mode & 07777) != (S_IRUSR | S_IWUSR)) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(info.st_mode & 07777));
    problem = std::string("has mode ") + mode + ", not 0600";
  } else if (static_cast<size_t>(info.st_size) != size) {
    problem = "is " + std::to_string(info.st_size) + " bytes, not the " + std::to_string(size) + " announced";
  }
  if (!problem.empty()) {
    ::close(fd);
    throw Error(describe(name) + " " + problem + ": refusing to use it");
  }
  void* data = mapShared(fd, size);
  const int error = errno;
  ::close(fd);
  if (data == nullptr) fail(name, "cannot map it", error);
  return ShmSegment(name, data, size, false);
}

ShmSegment::ShmSegment(ShmSegment&& other) noexcept
    : name_(std::move(other.name_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(other.size_),
      owner_(std::exchange(other.owner_, false)) {}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    unlink();
    if (data_ != nullptr) ::munmap(data_, size_);
    name_ = std::move(other.name_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = other.size_;
    owner_ = std::exchange(other.owner_, false);
  }
  return *this;
}

ShmSegment::~ShmSegment() {
  unlink();
  if (data_ != nullptr) ::munmap(data_, size_);
}

void ShmSegment::unlink() {
  if (!owner_) return;
  owner_ = false;
  ::shm_unlink(("/" + name_).c_str());
}

}  // namespace ddprun::worker
