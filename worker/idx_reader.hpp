#pragma once
// Reader for the IDX format of the MNIST family (http://yann.lecun.com/exdb/mnist/, "FILE FORMATS"):
// a big-endian header {0x00, 0x00, type, ndims}, ndims big-endian uint32 dimensions, then the data.
// Only type 0x08 (unsigned byte) is used by MNIST and Fashion-MNIST. Files may be gzip-compressed or raw.
#include <cstdint>
#include <string>
#include <vector>

namespace ddprun::worker {

/// An IDX array of unsigned bytes: `dims` (e.g. {10000, 28, 28}) and the row-major data.
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;
};

/// Reads the IDX file at `path` (gzip or raw), expecting `expectedDims` dimensions.
/// Throws DataError naming the file and the fault: missing, bad magic, wrong type or rank, a zero or
/// oversized dimension, truncated data, trailing bytes, or a corrupt gzip stream.
IdxArray readIdxFile(const std::string& path, int expectedDims);

}  // namespace ddprun::worker
