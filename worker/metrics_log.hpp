#pragma once
// --metrics-file: one JSON object per line, appended and flushed as it happens.
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace ddprun::worker {

class MetricsLog {
 public:
  /// Opens `path` for appending; an empty path makes every write a no-op. Throws IoError.
  explicit MetricsLog(const std::string& path);
  /// Appends `record` as one line and flushes it.
  void write(const nlohmann::json& record);

 private:
  std::ofstream out_;
  std::string path_;
};

}  // namespace ddprun::worker
