#pragma once
// --metrics-file: one JSON object per line, appended with one write(2) each as it happens.
#include <nlohmann/json.hpp>
#include <string>

namespace ddprun::worker {

class MetricsLog {
 public:
  /// Opens `path` for appending (created 0644 when missing; common/append_file.hpp: no other user's link followed in
  /// a sticky world-writable directory, a regular file or character device, never blocking on a FIFO); an empty path
  /// makes every write a no-op. Throws IoError.
  explicit MetricsLog(const std::string& path);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  /// Appends `record` as one line. A record the file does not take (a full disk, /dev/full) is one error line naming
  /// the file and the reason, once; training goes on and later records are dropped: metrics are not worth an epoch.
  void write(const nlohmann::json& record);

 private:
  int fd_ = -1;  ///< -1: no file, or given up after a failed write
  std::string path_;
};

}  // namespace ddprun::worker
