#include "worker/idx_reader.hpp"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "common/error.hpp"

namespace ddprun::worker {
namespace {

constexpr uint8_t kTypeUnsignedByte = 0x08;
// Bounds every allocation from an untrusted header (the full MNIST train set is 47 MB).
constexpr int64_t kMaxDataBytes = int64_t{1} << 31;

struct GzCloser {
  void operator()(gzFile_s* f) const {
    if (f != nullptr) gzclose_r(f);
  }
};
using GzHandle = std::unique_ptr<gzFile_s, GzCloser>;

class IdxStream {
 public:
  explicit IdxStream(std::string path) : path_(std::move(path)) {
    if (!std::filesystem::is_regular_file(path_)) fail("file not found");
    file_.reset(gzopen(path_.c_str(), "rb"));
    if (!file_) fail("cannot open");
    gzbuffer(file_.get(), 1 << 17);
  }

  /// Reads exactly `size` bytes; `what` names the part for the error message.
  void readExactly(void* out, size_t size, const std::string& what) {
    size_t done = 0;
    while (done < size) {
      unsigned chunk = static_cast<unsigned>(std::min<size_t>(size - done, 1u << 30));
      int got = gzread(file_.get(), static_cast<char*>(out) + done, chunk);
      if (got < 0) fail("corrupt gzip data while reading " + what + ": " + zlibError());
      if (got == 0) {
        fail("truncated: " + what + " needs " + std::to_string(size) + " bytes, only " + std::to_string(done) +
             " present" + gzipEndNote());
      }
      done += static_cast<size_t>(got);
    }
  }

  uint32_t readBigEndian32(const std::string& what) {
    uint8_t b[4];
    readExactly(b, 4, what);
    return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
  }

  /// Fails when anything but the end of the stream follows the data.
  void expectEnd() {
    char extra = 0;
    int got = gzread(file_.get(), &extra, 1);
    if (got < 0) fail("corrupt gzip data after the array: " + zlibError());
    if (got > 0) fail("unexpected trailing bytes after the array (wrong dimensions?)");
    int rc = gzclose_r(file_.release());
    if (rc != Z_OK) fail("corrupt gzip stream (zlib code " + std::to_string(rc) + ")");
  }

  [[noreturn]] void fail(const std::string& why) const { throw DataError("IDX file " + path_ + ": " + why); }

 private:
  std::string zlibError() {
    int code = 0;
    const char* text = gzerror(file_.get(), &code);
    return text != nullptr ? text : "unknown zlib error";
  }
  std::string gzipEndNote() {
    int code = 0;
    gzerror(file_.get(), &code);
    return code == Z_BUF_ERROR ? " (the gzip stream ends early)" : "";
  }

  std::string path_;
  GzHandle file_;
};

}  // namespace

IdxArray readIdxFile(const std::string& path, int expectedDims) {
  IdxStream in(path);
  uint8_t magic[4];
  in.readExactly(magic, 4, "the header");
  if (magic[0] != 0 || magic[1] != 0) in.fail("bad magic number (not an IDX file)");
  if (magic[2] != kTypeUnsignedByte) {
    char type[8];
    std::snprintf(type, sizeof type, "0x%02x", magic[2]);
    in.fail(std::string("unsupported data type ") + type + " (expected 0x08, unsigned byte)");
  }
  if (magic[3] != expectedDims) {
    in.fail("has " + std::to_string(magic[3]) + " dimensions, expected " + std::to_string(expectedDims));
  }
  IdxArray array;
  int64_t total = 1;
  for (int d = 0; d < expectedDims; ++d) {
    int64_t dim = in.readBigEndian32("dimension " + std::to_string(d));
    if (dim == 0) in.fail("dimension " + std::to_string(d) + " is zero");
    total *= dim;
    if (total > kMaxDataBytes) in.fail("dimensions describe more than 2 GiB of data");
    array.dims.push_back(dim);
  }
  array.data.resize(static_cast<size_t>(total));
  in.readExactly(array.data.data(), array.data.size(), "the data");
  in.expectEnd();
  return array;
}

}  // namespace ddprun::worker
