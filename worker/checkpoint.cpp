#include "worker/checkpoint.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <spdlog/spdlog.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <regex>

#include "common/atomic_file.hpp"
#include "common/error.hpp"

namespace ddprun::worker {
namespace fs = std::filesystem;
namespace {

// Format 3: an archive holding the state's own archive as a byte tensor ("payload") and a CRC-32
// ("payload_crc32") of the format version's 8 bytes followed by the payload, so the version is checked like
// the rest. Format 2 files (the CRC of the payload alone) and format 1 files (the state archive alone, no
// checksum) still load.
constexpr int64_t kFormatVersion = 3;
constexpr int64_t kPayloadOnlyCrcVersion = 2;
constexpr int64_t kStateVersion = 1;
constexpr size_t kCheckpointsKept = 2;

torch::Tensor scalar(int64_t value) { return torch::tensor(value, torch::kInt64); }

int64_t readScalar(torch::serialize::InputArchive& archive, const std::string& key) {
  torch::Tensor t;
  archive.read(key, t);
  return t.item<int64_t>();
}

void writeModel(torch::serialize::OutputArchive& archive, torch::nn::Module& model) {
  // A copy each: a parameter is a view of the optimizer's flat buffer (flat_sgd.hpp), and an archive keeps a view's
  // whole storage, shared, where a file of each parameter on its own is wanted.
  const auto ownCpuCopy = torch::TensorOptions().device(torch::kCPU);
  for (const auto& item : model.named_parameters()) {
    archive.write("model/" + item.key(), item.value().detach().to(ownCpuCopy, /*non_blocking=*/false, /*copy=*/true));
  }
  for (const auto& item : model.named_buffers()) archive.write("model/" + item.key(), item.value().cpu());
}

void readModel(torch::serialize::InputArchive& archive, torch::nn::Module& model) {
  torch::NoGradGuard noGrad;
  auto copyInto = [&](const std::string& name, torch::Tensor target) {
    torch::Tensor stored;
    archive.read("model/" + name, stored);
    if (!stored.sizes().equals(target.sizes())) {
      throw CheckpointMismatch("tensor " + name + " has shape " + c10::str(stored.sizes()) + ", the model expects " +
                               c10::str(target.sizes()) + " (a checkpoint of another model?)");
    }
    target.copy_(stored);
  };
  for (const auto& item : model.named_parameters()) copyInto(item.key(), item.value());
  for (const auto& item : model.named_buffers()) copyInto(item.key(), item.value());
}

/// The serialised bytes of `archive`.
std::string toBytes(torch::serialize::OutputArchive& archive) {
  std::string bytes;
  archive.save_to([&bytes](const void* data, size_t size) {
    bytes.append(static_cast<const char*>(data), size);
    return size;
  });
  return bytes;
}

/// CRC-32 (zlib's, the polynomial of zip and PNG) of `size` bytes.
int64_t crc32Of(const void* data, size_t size) {
  return static_cast<int64_t>(crc32_z(0L, static_cast<const Bytef*>(data), size));
}

/// Format 3's checksum: the CRC-32 of the version (8 little-endian bytes) and then the payload.
int64_t versionedCrc32(int64_t version, const void* data, size_t size) {
  unsigned char raw[8];
  std::memcpy(raw, &version, 8);
  const uLong head = crc32_z(0L, raw, 8);
  return static_cast<int64_t>(crc32_z(head, static_cast<const Bytef*>(data), size));
}

/// `stateBytes` wrapped with their checksum, as a format-3 file's bytes.
std::string wrapWithChecksum(std::string& stateBytes) {
  torch::serialize::OutputArchive outer;
  outer.write("meta/format_version", scalar(kFormatVersion));
  outer.write("payload", torch::from_blob(stateBytes.data(), {static_cast<int64_t>(stateBytes.size())}, torch::kUInt8));
  outer.write("payload_crc32", scalar(versionedCrc32(kFormatVersion, stateBytes.data(), stateBytes.size())));
  return toBytes(outer);
}

/// The state archive of the checkpoint at `path`, its tensors mapped to `device`: unwrapped and checked
/// against its CRC-32 (format 2), or read as it is (format 1). Throws DataError on a checksum mismatch or
/// an unknown format; c10::Error from LibTorch when the file is not an archive.
torch::serialize::InputArchive openState(const std::string& path, const torch::Device& device) {
  torch::serialize::InputArchive outer;
  outer.load_from(path, torch::Device(torch::kCPU));
  const int64_t version = readScalar(outer, "meta/format_version");
  torch::serialize::InputArchive state;
  torch::Tensor payload;
  const bool wrapped = outer.try_read("payload", payload);
  if (version == kStateVersion && !wrapped) {
    spdlog::warn("checkpoint {} has no checksum (written by an older worker); loading it unchecked", path);
    state.load_from(path, device);
    return state;
  }
  // Any other version, or a version 1 on a wrapped file, is damage to the version field: a format-3 file's
  // checksum covers its version, and no other version ever held a payload.
  if (!wrapped || (version != kFormatVersion && version != kPayloadOnlyCrcVersion)) {
    throw DataError("format version " + std::to_string(version) + " does not match the file's layout (damaged)");
  }
  payload = payload.contiguous();
  const auto* data = static_cast<const char*>(payload.data_ptr());
  const auto size = static_cast<size_t>(payload.numel());
  const int64_t stored = readScalar(outer, "payload_crc32");
  const int64_t expected = version == kFormatVersion ? versionedCrc32(version, data, size) : crc32Of(data, size);
  if (payload.scalar_type() != torch::kUInt8 || expected != stored) {
    throw DataError("checksum mismatch (the file changed after it was written: disk, copy or manual damage)");
  }
  state.load_from(data, size, device);
  return state;
}

template <typename Fn>
auto withFileContext(const std::string& path, Fn&& fn) {
  try {
    return fn();
  } catch (const CheckpointMismatch& e) {
    throw CheckpointMismatch("checkpoint " + path + " does not fit this model: " + e.what());
  } catch (const c10::Error& e) {
    // A missing archive entry means a file of another model (or not ours); anything else is damage.
    const std::string what = firstLine(e.what());
    if (what.find("No such serialized") != std::string::npos || what.find("not found") != std::string::npos) {
      throw CheckpointMismatch("checkpoint " + path + " does not fit this model: " + what);
    }
    throw DataError("checkpoint " + path + " is unreadable or corrupt: " + what);
  } catch (const std::exception& e) {
    throw DataError("checkpoint " + path + " is unreadable or corrupt: " + firstLine(e.what()));
  }
}

/// Writes `bytes` to `path` and flushes it; throws IoError (and removes the file) on any failure.
void writeBytes(const std::string& path, const std::string& bytes) {
  FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) throw IoError("cannot create " + path + ": " + std::strerror(errno));
  const bool written = std::fwrite(bytes.data(), 1, bytes.size(), file) == bytes.size();
  const int savedErrno = errno;
  const bool closed = std::fclose(file) == 0;
  if (!written || !closed) {
    std::remove(path.c_str());
    throw IoError("cannot write checkpoint " + path + ": " + std::strerror(written ? errno : savedErrno));
  }
}

}  // namespace

std::string checkpointPath(const std::string& dir, int64_t globalStep) {
  char name[64];
  std::snprintf(name, sizeof name, "checkpoint-%09lld.pt", static_cast<long long>(globalStep));
  return (fs::path(dir) / name).string();
}

std::optional<int64_t> checkpointStep(const std::string& path) {
  static const std::regex pattern(R"(checkpoint-(\d{9})\.pt)");
  std::smatch match;
  const std::string name = fs::path(path).filename().string();
  if (!std::regex_match(name, match, pattern)) return std::nullopt;
  return std::stoll(match[1].str());
}

int removeStaleTempFiles(const std::string& dir) {
  static const std::regex pattern(R"(checkpoint-\d{9}\.pt\.tmp\.\d+)");
  std::error_code ec;
  int removed = 0;
  if (!fs::is_directory(dir, ec)) return 0;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (std::regex_match(entry.path().filename().string(), pattern) && fs::remove(entry.path(), ec)) ++removed;
  }
  return removed;
}

namespace {

/// What kind of entry `status` describes, for a warning.
std::string kindOf(const fs::file_status& status) {
  switch (status.type()) {
    case fs::file_type::directory: return "a directory";
    case fs::file_type::fifo: return "a FIFO";
    case fs::file_type::socket: return "a socket";
    case fs::file_type::character: return "a character device";
    case fs::file_type::block: return "a block device";
    case fs::file_type::regular: return "a regular file";
    default: return "an entry of unknown type";
  }
}

}  // namespace

CheckpointScan scanCheckpointDir(const std::string& dir) {
  static const std::regex temp(R"(checkpoint-\d{9}\.pt\.tmp\.\d+)");
  CheckpointScan scan;
  std::error_code ec;
  if (dir.empty() || !fs::is_directory(dir, ec)) return scan;
  std::vector<std::pair<int64_t, std::string>> found;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, temp)) continue;  // an interrupted write: removed at start
    const auto step = checkpointStep(name);
    std::error_code statEc;
    const fs::file_status status = fs::status(entry.path(), statEc);  // follows links; never opens the entry
    if (statEc) {
      scan.others.push_back({name, "a symbolic link that leads nowhere or in a loop", step, false});
    } else if (status.type() == fs::file_type::regular && step) {
      found.emplace_back(*step, entry.path().string());
    } else if (step) {
      const bool directory = status.type() == fs::file_type::directory;
      scan.others.push_back({name, kindOf(status) + " named like a checkpoint", step, directory});
    } else {
      scan.others.push_back({name, kindOf(status) + ", not named like a checkpoint", std::nullopt, false});
    }
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (auto& [step, path] : found) scan.checkpoints.push_back(path);
  return scan;
}

std::vector<std::string> listCheckpoints(const std::string& dir) { return scanCheckpointDir(dir).checkpoints; }

std::string saveCheckpoint(const std::string& dir, torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                           const TrainingProgress& progress) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw IoError("cannot create checkpoint dir " + dir + ": " + ec.message());
  torch::serialize::OutputArchive archive;
  archive.write("meta/format_version", scalar(kStateVersion));
  archive.write("meta/epoch", scalar(progress.epoch));
  archive.write("meta/step_in_epoch", scalar(progress.stepInEpoch));
  archive.write("meta/global_step", scalar(progress.globalStep));
  archive.write("meta/world_size", scalar(progress.worldSize));
  archive.write("meta/batch_size", scalar(progress.batchSize));
  archive.write("meta/sampler_seed", scalar(progress.samplerSeed));
  archive.write("rng/cpu", at::detail::getDefaultCPUGenerator().get_state());
  writeModel(archive, model);
  torch::serialize::OutputArchive optimizerArchive;
  optimizer.save(optimizerArchive);
  archive.write("optimizer", optimizerArchive);

  // Serialise in memory: LibTorch's file writer aborts the process when the disk fills up mid-write.
  std::string stateBytes = toBytes(archive);
  const std::string bytes = wrapWithChecksum(stateBytes);
  const std::string finalPath = checkpointPath(dir, progress.globalStep);
  const std::string temp = tempPathFor(finalPath);
  writeBytes(temp, bytes);
  try {
    commitFile(temp, finalPath);
  } catch (...) {
    std::remove(temp.c_str());
    throw;
  }
  // Retention counts only checkpoints up to this step, so stray files named like later checkpoints
  // can never push the one just written out.
  size_t kept = 0;
  for (const auto& path : listCheckpoints(dir)) {
    if (checkpointStep(path).value_or(0) > progress.globalStep) continue;
    if (++kept > kCheckpointsKept) fs::remove(path, ec);
  }
  return finalPath;
}

TrainingProgress loadCheckpoint(const std::string& path, torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                                const torch::Device& device) {
  return withFileContext(path, [&] {
    torch::serialize::InputArchive archive = openState(path, device);
    TrainingProgress progress;
    progress.epoch = readScalar(archive, "meta/epoch");
    progress.stepInEpoch = readScalar(archive, "meta/step_in_epoch");
    progress.globalStep = readScalar(archive, "meta/global_step");
    progress.worldSize = readScalar(archive, "meta/world_size");
    progress.batchSize = readScalar(archive, "meta/batch_size");
    progress.samplerSeed = readScalar(archive, "meta/sampler_seed");
    readModel(archive, model);
    torch::serialize::InputArchive optimizerArchive;
    archive.read("optimizer", optimizerArchive);
    optimizer.load(optimizerArchive);
    torch::Tensor rng;
    archive.read("rng/cpu", rng);
    at::Generator generator = at::detail::getDefaultCPUGenerator();  // shares the global generator
    generator.set_state(rng.cpu());  // mapped to `device` with the rest; the CPU generator wants it on the CPU
    return progress;
  });
}

void loadModelFromCheckpoint(const std::string& path, torch::nn::Module& model) {
  withFileContext(path, [&] {
    torch::serialize::InputArchive archive = openState(path, torch::kCPU);
    readModel(archive, model);
    return 0;
  });
}

}  // namespace ddprun::worker
