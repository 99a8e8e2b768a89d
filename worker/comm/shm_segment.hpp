#pragma once
// One POSIX shared-memory segment (shm_open + mmap), made by one rank and mapped by the others of its host.
// The maker creates it exclusively (O_CREAT|O_EXCL) with mode 0600 and reserves its memory up front
// (posix_fallocate: a full /dev/shm fails here with a clear error, not later with SIGBUS); a peer opens it
// only if it belongs to this user, has mode 0600 and exactly the size it was told. LibTorch-free.
#include <cstddef>
#include <string>

namespace ddprun::worker {

class ShmSegment {
 public:
  /// Creates and maps segment `name` (a file name in /dev/shm, no slash) of `size` bytes, zero-filled.
  /// Throws ddprun::Error naming the segment and the cause (exists, no space, …).
  static ShmSegment create(const std::string& name, size_t size);

  /// Opens and maps the existing segment `name`, which must be exactly `size` bytes, owned by this
  /// process's effective user and of mode 0600. Throws ddprun::Error naming what does not match.
  static ShmSegment open(const std::string& name, size_t size);

  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  /// Unmaps, and removes the name when this process created it and has not removed it yet.
  ~ShmSegment();

  /// Removes the segment's name (shm_unlink) if this process created it; the mappings stay valid. Idempotent.
  void unlink();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  ShmSegment(std::string name, void* data, size_t size, bool owner);
  std::string name_;
  void* data_ = nullptr;
  size_t size_ = 0;
  bool owner_ = false;  ///< created here: this process removes the name
};

/// 32 lower-case hex digits from the kernel's random source (getrandom), for unguessable names.
std::string randomHex128();

}  // namespace ddprun::worker
