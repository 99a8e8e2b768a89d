#include "worker/mnist_data.hpp"

#include <filesystem>
#include <optional>

#include "common/error.hpp"
#include "worker/idx_reader.hpp"

namespace ddprun::worker {
namespace fs = std::filesystem;

DatasetKind parseDatasetKind(const std::string& name) {
  if (name == "mnist") return DatasetKind::kMnist;
  if (name == "fashion-mnist") return DatasetKind::kFashionMnist;
  throw ConfigError("--dataset: expected mnist or fashion-mnist, got '" + name + "'");
}

std::pair<double, double> normalisationFor(DatasetKind kind) {
  return kind == DatasetKind::kMnist ? std::pair{0.1307, 0.3081} : std::pair{0.2860, 0.3530};
}

namespace {

/// Finds `baseName` or `baseName.gz` in the data dir or its torchvision raw/ folder.
std::optional<std::string> findIdxFile(DatasetKind kind, const std::string& dataDir, const std::string& baseName) {
  const fs::path root(dataDir);
  const fs::path raw = root / (kind == DatasetKind::kMnist ? "MNIST" : "FashionMNIST") / "raw";
  for (const fs::path& dir : {root, raw}) {
    for (const char* suffix : {"", ".gz"}) {
      fs::path candidate = dir / (baseName + std::string(suffix));
      if (fs::is_regular_file(candidate)) return candidate.string();
    }
  }
  return std::nullopt;
}

std::string requireIdxFile(DatasetKind kind, const std::string& dataDir, const std::string& baseName) {
  auto path = findIdxFile(kind, dataDir, baseName);
  if (!path) {
    throw DataError("data file " + baseName + "[.gz] not found in " + dataDir +
                    " (nor in its torchvision raw/ folder)");
  }
  return *path;
}

Split loadSplit(DatasetKind kind, const std::string& dataDir, const std::string& prefix) {
  const std::string imagesPath = requireIdxFile(kind, dataDir, prefix + "-images-idx3-ubyte");
  const std::string labelsPath = requireIdxFile(kind, dataDir, prefix + "-labels-idx1-ubyte");
  IdxArray images = readIdxFile(imagesPath, 3);
  IdxArray labels = readIdxFile(labelsPath, 1);
  if (images.dims[1] != 28 || images.dims[2] != 28) {
    throw DataError("IDX file " + imagesPath + ": images are " + std::to_string(images.dims[1]) + "x" +
                    std::to_string(images.dims[2]) + ", expected 28x28");
  }
  if (images.dims[0] != labels.dims[0]) {
    throw DataError("IDX files " + imagesPath + " and " + labelsPath + " disagree: " + std::to_string(images.dims[0]) +
                    " images but " + std::to_string(labels.dims[0]) + " labels");
  }
  for (size_t i = 0; i < labels.data.size(); ++i) {
    if (labels.data[i] > 9) {
      throw DataError("IDX file " + labelsPath + ": label " + std::to_string(labels.data[i]) + " at index " +
                      std::to_string(i) + " is outside 0..9");
    }
  }
  const int64_t n = images.dims[0];
  auto [mean, std] = normalisationFor(kind);
  Split split;
  split.images = torch::from_blob(images.data.data(), {n, 1, 28, 28}, torch::kUInt8)
                     .to(torch::kFloat32)
                     .div_(255.0)
                     .sub_(mean)
                     .div_(std);
  split.labels = torch::from_blob(labels.data.data(), {n}, torch::kUInt8).to(torch::kInt64);
  return split;
}

}  // namespace

Dataset loadDataset(DatasetKind kind, const std::string& dataDir) {
  Dataset dataset;
  dataset.test = loadSplit(kind, dataDir, "t10k");
  if (findIdxFile(kind, dataDir, "train-images-idx3-ubyte")) {
    dataset.train = loadSplit(kind, dataDir, "train");
    dataset.description = std::to_string(dataset.train.size()) + " train / " + std::to_string(dataset.test.size()) +
                          " test images from " + dataDir;
    return dataset;
  }
  // The repo carries only the test split: train on its head, evaluate on its tail.
  const int64_t total = dataset.test.size();
  if (total <= kFallbackTrainSize) {
    throw DataError("train-images-idx3-ubyte[.gz] not found in " + dataDir + " and the test split has only " +
                    std::to_string(total) + " images, too few to split");
  }
  Split full = dataset.test;
  dataset.train = {full.images.narrow(0, 0, kFallbackTrainSize), full.labels.narrow(0, 0, kFallbackTrainSize)};
  dataset.test = {full.images.narrow(0, kFallbackTrainSize, total - kFallbackTrainSize),
                  full.labels.narrow(0, kFallbackTrainSize, total - kFallbackTrainSize)};
  dataset.trainFromTestSplit = true;
  dataset.description = "full training set absent from " + dataDir + ": training on the first " +
                        std::to_string(kFallbackTrainSize) + " test images, evaluating on the last " +
                        std::to_string(total - kFallbackTrainSize);
  return dataset;
}

}  // namespace ddprun::worker
