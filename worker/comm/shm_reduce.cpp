#include "worker/comm/shm_reduce.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace ddprun::worker {
namespace {

/// Elements summed per block: the accumulator block stays in L1 while every source streams through it.
constexpr size_t kBlock = 1024;

template <typename T>
void sumBlocks(T* dst, const void* const* srcs, int count, size_t n) {
  T acc[kBlock];
  for (size_t base = 0; base < n; base += kBlock) {
    const size_t m = std::min(kBlock, n - base);
    std::memcpy(acc, static_cast<const T*>(srcs[0]) + base, m * sizeof(T));
    for (int j = 1; j < count; ++j) {
      const T* __restrict src = static_cast<const T*>(srcs[j]) + base;
      for (size_t i = 0; i < m; ++i) acc[i] += src[i];
    }
    std::memcpy(dst + base, acc, m * sizeof(T));
  }
}

void sumBf16Blocks(uint16_t* dst, const void* const* srcs, int count, size_t n) {
  float acc[kBlock];
  for (size_t base = 0; base < n; base += kBlock) {
    const size_t m = std::min(kBlock, n - base);
    const uint16_t* __restrict first = static_cast<const uint16_t*>(srcs[0]) + base;
    for (size_t i = 0; i < m; ++i) acc[i] = bf16ToFloat(first[i]);
    for (int j = 1; j < count; ++j) {
      const uint16_t* __restrict src = static_cast<const uint16_t*>(srcs[j]) + base;
      for (size_t i = 0; i < m; ++i) acc[i] += bf16ToFloat(src[i]);
    }
    uint16_t out[kBlock];
    for (size_t i = 0; i < m; ++i) out[i] = floatToBf16(acc[i]);
    std::memcpy(dst + base, out, m * sizeof(uint16_t));
  }
}

}  // namespace

float bf16ToFloat(uint16_t value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

uint16_t floatToBf16(float value) {
  // c10/util/BFloat16.h, round_to_nearest_even.
  if (std::isnan(value)) return 0x7FC0;
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  const uint32_t roundingBias = ((bits >> 16) & 1) + 0x7FFF;
  return static_cast<uint16_t>((bits + roundingBias) >> 16);
}

size_t dtypeSize(ShmDtype dtype) {
  switch (dtype) {
    case ShmDtype::kFloat32: return 4;
    case ShmDtype::kFloat64: return 8;
    case ShmDtype::kBFloat16: return 2;
    case ShmDtype::kInt32: return 4;
    case ShmDtype::kInt64: return 8;
  }
  return 1;
}

std::string dtypeName(ShmDtype dtype) {
  switch (dtype) {
    case ShmDtype::kFloat32: return "float32";
    case ShmDtype::kFloat64: return "float64";
    case ShmDtype::kBFloat16: return "bfloat16";
    case ShmDtype::kInt32: return "int32";
    case ShmDtype::kInt64: return "int64";
  }
  return "?";
}

void sumInto(ShmDtype dtype, void* dst, const void* const* srcs, int count, size_t n) {
  switch (dtype) {
    case ShmDtype::kFloat32: return sumBlocks(static_cast<float*>(dst), srcs, count, n);
    case ShmDtype::kFloat64: return sumBlocks(static_cast<double*>(dst), srcs, count, n);
    case ShmDtype::kBFloat16: return sumBf16Blocks(static_cast<uint16_t*>(dst), srcs, count, n);
    case ShmDtype::kInt32: return sumBlocks(static_cast<int32_t*>(dst), srcs, count, n);
    case ShmDtype::kInt64: return sumBlocks(static_cast<int64_t*>(dst), srcs, count, n);
  }
}

}  // namespace ddprun::worker
