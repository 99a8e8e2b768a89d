// IDX reader and MNIST loader: good raw and gzip files, and every kind of bad file.
#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include "common/error.hpp"
#include "support/child_process.hpp"
#include "worker/idx_reader.hpp"
#include "worker/mnist_data.hpp"

namespace ddprun::worker {
namespace fs = std::filesystem;
namespace {

std::vector<uint8_t> idxBytes(const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data,
                              uint8_t type = 0x08) {
  std::vector<uint8_t> bytes{0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<uint8_t>(d >> shift));
  }
  bytes.insert(bytes.end(), data.begin(), data.end());
  return bytes;
}

void writeRaw(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

void writeGzip(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}

std::vector<uint8_t> pattern(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7 % 256);
  return v;
}

class IdxReaderTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::makeTempDir("idx"); }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }

  /// Expects readIdxFile to fail with a DataError that names the file and contains `fragment`.
  void expectError(const std::string& file, int dims, const std::string& fragment) {
    try {
      readIdxFile(file, dims);
      ADD_FAILURE() << "no error for " << file;
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  }

  std::string dir_;
};

TEST_F(IdxReaderTest, ReadsRawAndGzipIdentically) {
  auto bytes = idxBytes({3, 2, 4}, pattern(24));
  writeRaw(path("a"), bytes);
  writeGzip(path("a.gz"), bytes);
  for (const auto& file : {path("a"), path("a.gz")}) {
    IdxArray array = readIdxFile(file, 3);
    EXPECT_EQ(array.dims, (std::vector<int64_t>{3, 2, 4}));
    EXPECT_EQ(array.data, pattern(24));
  }
}

TEST_F(IdxReaderTest, RejectsBadFiles) {
  expectError(path("missing"), 1, "not found");
  writeRaw(path("magic"), {1, 2, 8, 1, 0, 0, 0, 1, 5});
  expectError(path("magic"), 1, "bad magic");
  writeRaw(path("type"), idxBytes({1}, {5}, 0x0D));
  expectError(path("type"), 1, "unsupported data type 0x0d");
  writeRaw(path("rank"), idxBytes({1, 1}, {5}));
  expectError(path("rank"), 1, "has 2 dimensions, expected 1");
  writeRaw(path("zero"), idxBytes({0}, {}));
  expectError(path("zero"), 1, "is zero");
  writeRaw(path("huge"), idxBytes({65536, 65536}, {}));
  expectError(path("huge"), 2, "more than 2 GiB");
  writeRaw(path("short"), idxBytes({10}, pattern(6)));
  expectError(path("short"), 1, "truncated");
  writeRaw(path("long"), idxBytes({4}, pattern(6)));
  expectError(path("long"), 1, "trailing bytes");
  writeRaw(path("header"), {0, 0});
  expectError(path("header"), 1, "truncated");
}

TEST_F(IdxReaderTest, RejectsTruncatedAndCorruptGzip) {
  writeGzip(path("full.gz"), idxBytes({1000}, pattern(1000)));
  std::string gz = test::readFile(path("full.gz"));
  std::ofstream(path("cut.gz"), std::ios::binary) << gz.substr(0, gz.size() / 2);
  expectError(path("cut.gz"), 1, "truncated");
  std::string corrupt = gz;
  corrupt[corrupt.size() - 6] ^= 0x5A;  // inside the CRC32 trailer
  std::ofstream(path("crc.gz"), std::ios::binary) << corrupt;
  expectError(path("crc.gz"), 1, "corrupt gzip");
}

TEST_F(IdxReaderTest, LoadsTheCarriedMnistSampleWithTheFallbackSplit) {
  Dataset data = loadDataset(DatasetKind::kMnist, DDPRUN_SOURCE_DIR "/data/mnist");
  EXPECT_TRUE(data.trainFromTestSplit);
  EXPECT_EQ(data.train.size(), 9000);
  EXPECT_EQ(data.test.size(), 1000);
  EXPECT_EQ(data.train.images.sizes(), (std::vector<int64_t>{9000, 1, 28, 28}));
  EXPECT_EQ(data.train.labels.dtype(), torch::kInt64);
  // Normalised with MNIST's mean/std: the mean over many images is close to 0 and the std close to 1.
  EXPECT_NEAR(data.train.images.mean().item<double>(), 0.0, 0.05);
  EXPECT_NEAR(data.train.images.std().item<double>(), 1.0, 0.05);
  EXPECT_EQ(data.train.labels[0].item<int64_t>(), 7);  // the first t10k label is a 7
}

TEST_F(IdxReaderTest, FindsTorchvisionLayoutAndChecksConsistency) {
  const std::string raw = dir_ + "/MNIST/raw";
  fs::create_directories(raw);
  auto images = idxBytes({12000, 28, 28}, std::vector<uint8_t>(12000 * 784, 128));
  std::vector<uint8_t> labelValues(12000, 3);
  writeGzip(raw + "/t10k-images-idx3-ubyte.gz", images);
  writeRaw(raw + "/t10k-labels-idx1-ubyte", idxBytes({12000}, labelValues));
  Dataset data = loadDataset(DatasetKind::kMnist, dir_);
  EXPECT_EQ(data.train.size(), 9000);
  EXPECT_EQ(data.test.size(), 3000);

  labelValues[5] = 10;
  writeRaw(raw + "/t10k-labels-idx1-ubyte", idxBytes({12000}, labelValues));
  EXPECT_THROW(
      {
        try {
          loadDataset(DatasetKind::kMnist, dir_);
        } catch (const DataError& e) {
          EXPECT_NE(std::string(e.what()).find("label 10 at index 5"), std::string::npos) << e.what();
          throw;
        }
      },
      DataError);

  writeRaw(raw + "/t10k-labels-idx1-ubyte", idxBytes({11999}, std::vector<uint8_t>(11999, 1)));
  EXPECT_THROW(loadDataset(DatasetKind::kMnist, dir_), DataError);
  fs::remove(raw + "/t10k-labels-idx1-ubyte");
  try {
    loadDataset(DatasetKind::kMnist, dir_);
    ADD_FAILURE() << "no error for a missing labels file";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("t10k-labels-idx1-ubyte"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ddprun::worker
