#include "worker/metrics_log.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/append_file.hpp"
#include "common/error.hpp"

namespace ddprun::worker {

MetricsLog::MetricsLog(const std::string& path) : path_(path) {
  if (path.empty()) return;
  try {
    fd_ = openForAppend(path);
  } catch (const IoError& e) {
    throw IoError(std::string("--metrics-file ") + e.what());
  }
}

MetricsLog::~MetricsLog() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsLog::write(const nlohmann::json& record) {
  if (fd_ < 0) return;
  const std::string line = record.dump() + '\n';
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      spdlog::error("--metrics-file {}: cannot write a record ({}); training goes on without metrics", path_,
                    n < 0 ? std::strerror(errno) : "nothing written");
      ::close(fd_);
      fd_ = -1;
      return;
    }
    done += static_cast<size_t>(n);
  }
}

}  // namespace ddprun::worker
