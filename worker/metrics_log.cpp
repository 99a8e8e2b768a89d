#include "worker/metrics_log.hpp"

#include "common/error.hpp"

namespace ddprun::worker {

MetricsLog::MetricsLog(const std::string& path) : path_(path) {
  if (path.empty()) return;
  out_.open(path, std::ios::app);
  if (!out_) throw IoError("cannot open metrics file " + path + " for appending");
}

void MetricsLog::write(const nlohmann::json& record) {
  if (path_.empty()) return;
  out_ << record.dump() << '\n';
  out_.flush();
  if (!out_) throw IoError("cannot write metrics file " + path_);
}

}  // namespace ddprun::worker
