// Checkpoint files: round trip of model, optimizer and progress; atomic naming; corrupt files.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>
#include <filesystem>

#include <fstream>
#include <map>

#include "common/error.hpp"
#include "support/child_process.hpp"
#include "support/model_compare.hpp"
#include "worker/checkpoint.hpp"
#include "worker/flat_sgd.hpp"
#include "worker/models.hpp"

namespace ddprun::worker {
namespace fs = std::filesystem;
namespace {

void trainSteps(Classifier& model, torch::optim::SGD& sgd, int steps) {
  for (int i = 0; i < steps; ++i) {
    sgd.zero_grad();
    torch::nn::functional::cross_entropy(model.forward(torch::randn({8, 1, 28, 28})),
                                         torch::randint(0, 10, {8}, torch::kInt64))
        .backward();
    sgd.step();
  }
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::makeTempDir("ckpt"); }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(CheckpointTest, RoundTripRestoresModelOptimizerProgressAndRng) {
  torch::manual_seed(1);
  Mlp model;
  torch::optim::SGD sgd(model.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  trainSteps(model, sgd, 3);
  TrainingProgress progress{2, 17, 157, 2, 64, 42};
  const std::string path = saveCheckpoint(dir_, model, sgd, progress);
  EXPECT_EQ(path, dir_ + "/checkpoint-000000157.pt");
  const torch::Tensor nextRandom = torch::rand({4});

  torch::manual_seed(99);
  Mlp restored;
  torch::optim::SGD restoredSgd(restored.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  TrainingProgress loaded = loadCheckpoint(path, restored, restoredSgd);
  EXPECT_EQ(loaded.epoch, 2);
  EXPECT_EQ(loaded.stepInEpoch, 17);
  EXPECT_EQ(loaded.globalStep, 157);
  EXPECT_EQ(loaded.worldSize, 2);
  EXPECT_EQ(loaded.batchSize, 64);
  EXPECT_EQ(loaded.samplerSeed, 42);
  EXPECT_EQ(test::maxAbsParameterDiff(model, restored), 0.0);
  EXPECT_TRUE(torch::equal(torch::rand({4}), nextRandom)) << "RNG state not restored";

  // Same data and same momentum buffers: one more step keeps both models identical.
  torch::manual_seed(5);
  trainSteps(model, sgd, 1);
  torch::manual_seed(5);
  trainSteps(restored, restoredSgd, 1);
  EXPECT_EQ(test::maxAbsParameterDiff(model, restored), 0.0) << "optimizer state (momentum) not restored";
}

TEST_F(CheckpointTest, IdenticalTrainingGivesIdenticalBytes) {
  // Two runs of the same training, each with its own tensors at their own addresses: a checkpoint is a function of
  // the training state alone (no address, time or hash-map order in it), so comparing files by hash works.
  std::vector<std::string> bytes;
  for (const std::string run : {"a", "b"}) {
    torch::manual_seed(1);
    auto model = makeModel("cnn");
    FlatSgd sgd(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-4));
    for (int i = 0; i < 3; ++i) {
      sgd.zeroGrad();
      torch::nn::functional::cross_entropy(model->forward(torch::randn({8, 1, 28, 28})),
                                           torch::randint(0, 10, {8}, torch::kInt64))
          .backward();
      sgd.step();
    }
    torch::manual_seed(7);  // the generator's state is saved too
    bytes.push_back(test::readFile(saveCheckpoint(dir_ + "/" + run, *model, sgd, {1, 2, 3, 2, 8, 42})));
  }
  ASSERT_GT(bytes[0].size(), 1000u);
  EXPECT_TRUE(bytes[0] == bytes[1]) << "the two checkpoints differ";
}

TEST_F(CheckpointTest, KeepsTheNewestTwoAndListsNewestFirst) {
  Mlp model;
  torch::optim::SGD sgd(model.parameters(), torch::optim::SGDOptions(0.1));
  for (int64_t step : {10, 20, 30}) saveCheckpoint(dir_, model, sgd, {0, step, step, 1, 64, 0});
  std::ofstream(dir_ + "/notes.txt") << "not a checkpoint";
  auto list = listCheckpoints(dir_);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(checkpointStep(list[0]), 30);
  EXPECT_EQ(checkpointStep(list[1]), 20);
  for (const auto& entry : fs::directory_iterator(dir_)) {
    EXPECT_EQ(entry.path().string().find(".tmp."), std::string::npos) << "temp file left: " << entry.path();
  }
  EXPECT_TRUE(listCheckpoints(dir_ + "/absent").empty());
}

TEST_F(CheckpointTest, CorruptOrForeignCheckpointsFailNamingTheFile) {
  Mlp model;
  torch::optim::SGD sgd(model.parameters(), torch::optim::SGDOptions(0.1));
  const std::string garbage = dir_ + "/checkpoint-000000005.pt";
  std::ofstream(garbage) << "garbage";
  try {
    loadCheckpoint(garbage, model, sgd);
    FAIL() << "no error";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(garbage), std::string::npos) << e.what();
  }
  Cnn cnn;
  torch::optim::SGD cnnSgd(cnn.parameters(), torch::optim::SGDOptions(0.1));
  const std::string cnnPath = saveCheckpoint(dir_, cnn, cnnSgd, {0, 1, 1, 1, 64, 0});
  try {
    loadCheckpoint(cnnPath, model, sgd);
    FAIL() << "an MLP loaded a CNN checkpoint";
  } catch (const CheckpointMismatch& e) {  // not "corrupt": resuming must stop, not start over
    EXPECT_NE(std::string(e.what()).find(cnnPath), std::string::npos) << e.what();
  }
}

TEST_F(CheckpointTest, BytesChangedInsideATensorOfAStructurallyValidFileFailTheChecksum) {
  Mlp model;
  torch::optim::SGD sgd(model.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  trainSteps(model, sgd, 1);
  const std::string path = saveCheckpoint(dir_, model, sgd, {0, 1, 1, 1, 64, 0});
  // The middle of the file is inside the largest tensor (fc1's weights, 784x256 floats): change 4 bytes there.
  {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(fs::file_size(path) / 2));
    file.write("\x7f\xc0\x00\x00", 4);
  }
  torch::serialize::InputArchive archive;
  ASSERT_NO_THROW(archive.load_from(path)) << "the damage must leave the file structurally valid";
  try {
    loadCheckpoint(path, model, sgd);
    FAIL() << "a checkpoint with changed bytes loaded";
  } catch (const CheckpointMismatch& e) {
    FAIL() << "damage is not another model: " << e.what();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(path + " is unreadable or corrupt: checksum mismatch"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(loadModelFromCheckpoint(path, model), DataError);
}

/// Rewrites the checkpoint at `path` with its format version set to `version`, everything else kept: the damage a
/// flipped version field does (the field is a tensor of its own in the archive).
void rewriteVersion(const std::string& path, int64_t version) {
  torch::serialize::InputArchive in;
  in.load_from(path);
  torch::Tensor payload, crc;
  in.read("payload", payload);
  in.read("payload_crc32", crc);
  torch::serialize::OutputArchive out;
  out.write("meta/format_version", torch::tensor(version, torch::kInt64));
  out.write("payload", payload);
  out.write("payload_crc32", crc);
  out.save_to(path);
}

TEST_F(CheckpointTest, TheFormatVersionIsCheckedLikeTheRestSoDamageToItFallsBack) {
  // The version used to lie outside the checksum: changed to 1, the file read as another model's ("does not
  // fit this model") and the worker exited 1 on every restart instead of falling back.
  Mlp model;
  torch::optim::SGD sgd(model.parameters(), torch::optim::SGDOptions(0.1));
  for (int64_t version : {1, 2, 4, 0, -1}) {
    const std::string path = saveCheckpoint(dir_, model, sgd, {0, version + 10, version + 10, 1, 64, 0});
    ASSERT_NO_THROW(loadCheckpoint(path, model, sgd)) << "an undamaged file loads";
    rewriteVersion(path, version);
    try {
      loadCheckpoint(path, model, sgd);
      FAIL() << "version " << version << " loaded";
    } catch (const CheckpointMismatch& e) {
      FAIL() << "version " << version << ": damage is not another model: " << e.what();
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find(path + " is unreadable or corrupt"), std::string::npos) << e.what();
    }
  }
}

TEST_F(CheckpointTest, EveryEntryThatIsNotACheckpointIsReportedAndADirectoryInTheWayIsNamed) {
  Mlp model;
  torch::optim::SGD sgd(model.parameters(), torch::optim::SGDOptions(0.1));
  saveCheckpoint(dir_, model, sgd, {0, 10, 10, 1, 64, 0});
  fs::create_directories(checkpointPath(dir_, 40));
  ASSERT_EQ(::mkfifo(checkpointPath(dir_, 30).c_str(), 0600), 0);
  fs::create_symlink("loop-b", dir_ + "/loop-a");
  fs::create_symlink("loop-a", dir_ + "/loop-b");
  fs::create_symlink(checkpointPath(dir_, 10), checkpointPath(dir_, 20));  // a link to a checkpoint is one
  std::ofstream(dir_ + "/notes.txt") << "mine";
  const CheckpointScan scan = scanCheckpointDir(dir_);
  EXPECT_EQ(scan.checkpoints, (std::vector<std::string>{checkpointPath(dir_, 20), checkpointPath(dir_, 10)}));
  std::map<std::string, CheckpointDirEntry> others;
  for (const auto& entry : scan.others) others[entry.name] = entry;
  ASSERT_EQ(others.size(), 5u);
  EXPECT_EQ(others["checkpoint-000000040.pt"].what, "a directory named like a checkpoint");
  EXPECT_TRUE(others["checkpoint-000000040.pt"].blocksWrite);
  EXPECT_EQ(others["checkpoint-000000040.pt"].step, 40);
  EXPECT_EQ(others["checkpoint-000000030.pt"].what, "a FIFO named like a checkpoint");
  EXPECT_FALSE(others["checkpoint-000000030.pt"].blocksWrite) << "a rename replaces a FIFO";
  EXPECT_EQ(others["loop-a"].what, "a symbolic link that leads nowhere or in a loop");
  EXPECT_EQ(others["notes.txt"].what, "a regular file, not named like a checkpoint");
}

TEST_F(CheckpointTest, StrayFilesNamedLikeLaterCheckpointsNeverEvictTheNewOne) {
  Mlp model;
  torch::optim::SGD sgd(model.parameters(), torch::optim::SGDOptions(0.1));
  std::ofstream(checkpointPath(dir_, 999)) << "junk";
  std::ofstream(checkpointPath(dir_, 1000));
  fs::create_directories(checkpointPath(dir_, 2000));
  for (int64_t step : {10, 20, 30}) saveCheckpoint(dir_, model, sgd, {0, step, step, 1, 64, 0});
  EXPECT_TRUE(fs::exists(checkpointPath(dir_, 30)));
  EXPECT_TRUE(fs::exists(checkpointPath(dir_, 20)));
  EXPECT_FALSE(fs::exists(checkpointPath(dir_, 10)));
}

TEST_F(CheckpointTest, AFullDiskFailsCleanlyAndLeavesNoTempFile) {
  Mlp model;
  torch::optim::SGD sgd(model.parameters(), torch::optim::SGDOptions(0.1));
  // The temp file's name is predictable; point it at /dev/full, which fails every write with ENOSPC.
  const std::string temp = checkpointPath(dir_, 7) + ".tmp." + std::to_string(::getpid());
  fs::create_symlink("/dev/full", temp);
  try {
    saveCheckpoint(dir_, model, sgd, {0, 7, 7, 1, 64, 0});
    FAIL() << "no error on a full disk";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("No space left on device"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(checkpointPath(dir_, 7)));
  EXPECT_FALSE(fs::exists(fs::symlink_status(temp))) << "temp file left behind";
  std::ofstream(checkpointPath(dir_, 8) + ".tmp.12345") << "torn";
  EXPECT_EQ(removeStaleTempFiles(dir_), 1);
}

}  // namespace
}  // namespace ddprun::worker
