#pragma once
// The element-wise sums of the shm backend: dst[i] = srcs[0][i] + srcs[1][i] + … + srcs[count-1][i], added
// in that order, for the dtypes the worker reduces. Written as plain loops over blocks that the compiler
// vectorises (this file is built with -O3); dst may be one of srcs (each element is read before it is
// written). bf16 values are summed in float32 and rounded once to nearest-even, as c10::BFloat16 rounds, so
// with two inputs the result equals c10's a + b. LibTorch-free.
#include <cstddef>
#include <cstdint>
#include <string>

namespace ddprun::worker {

/// The element types the shm backend reduces.
enum class ShmDtype { kFloat32, kFloat64, kBFloat16, kInt32, kInt64 };

/// Bytes per element of `dtype`.
size_t dtypeSize(ShmDtype dtype);

/// "float32", "bfloat16", …
std::string dtypeName(ShmDtype dtype);

/// dst[i] = sum of srcs[j][i] over j in [0, count), i in [0, n).
void sumInto(ShmDtype dtype, void* dst, const void* const* srcs, int count, size_t n);

/// bf16 <-> float32 as c10::BFloat16 converts (round to nearest even; NaN stays a quiet NaN).
float bf16ToFloat(uint16_t value);
uint16_t floatToBf16(float value);

}  // namespace ddprun::worker
