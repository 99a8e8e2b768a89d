#pragma once
// MNIST-format data sets (MNIST, Fashion-MNIST) loaded whole into memory as normalised tensors.
#include <torch/torch.h>

#include <string>

namespace ddprun::worker {

/// Which data set, which decides the file search and the normalisation constants.
enum class DatasetKind { kMnist, kFashionMnist };

/// Parses "mnist" or "fashion-mnist"; throws ConfigError otherwise.
DatasetKind parseDatasetKind(const std::string& name);

/// Debian's dataset-fashion-mnist location, the default data dir for Fashion-MNIST.
inline constexpr const char* kDebianFashionMnistDir = "/usr/share/datasets/fashion-mnist";

/// One split: images [N, 1, 28, 28] float32, normalised with the data set's mean and std;
/// labels [N] int64 in 0..9.
struct Split {
  torch::Tensor images;
  torch::Tensor labels;
  int64_t size() const { return labels.size(0); }
};

/// Train and test splits plus a one-line description of where they came from.
struct Dataset {
  Split train;
  Split test;
  std::string description;
  bool trainFromTestSplit = false;  ///< true when the train files were absent (see loadDataset)
};

/// Number of test images used for training when the full training set is absent.
inline constexpr int64_t kFallbackTrainSize = 9000;

/// Loads `kind` from `dataDir`. Files use the standard names (train-images-idx3-ubyte, …, optionally
/// .gz), directly in `dataDir` or in torchvision's `dataDir/MNIST/raw` (`FashionMNIST/raw`) layout.
/// When the training images are absent it trains on the first 9,000 test images and evaluates on the
/// last 1,000 (so the repo's carried sample works). Throws DataError naming a missing, truncated or
/// corrupt file, a count mismatch between images and labels, or a label outside 0..9.
Dataset loadDataset(DatasetKind kind, const std::string& dataDir);

/// Mean and std used to normalise pixel values in [0, 1] (torchvision's customary constants).
std::pair<double, double> normalisationFor(DatasetKind kind);

}  // namespace ddprun::worker
