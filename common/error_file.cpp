#include "common/error_file.hpp"

#include <nlohmann/json.hpp>

#include "common/atomic_file.hpp"
#include "common/error.hpp"
#include "common/untrusted_file.hpp"

namespace ddprun {

std::string toErrorFileJson(const WorkerErrorRecord& record) {
  nlohmann::json json = {
      {"message",
       {{"message", record.message},
        {"extraInfo", {{"py_callstack", record.callstack}, {"timestamp", std::to_string(record.timestamp)}}}}}};
  return json.dump();
}

void writeErrorFile(const std::string& path, const WorkerErrorRecord& record) {
  writeFileAtomically(path, toErrorFileJson(record));
}

std::optional<WorkerErrorRecord> readErrorFile(const std::string& path) {
  // The worker controls this path: it may be a FIFO, a link or a huge file. Read it without blocking or
  // following a link, up to a bound (a traceback of thousands of frames fits).
  constexpr size_t kMaxErrorFileBytes = 16u << 20;
  const auto text = readUntrustedFile(path, kMaxErrorFileBytes);
  if (!text) return std::nullopt;
  try {
    auto json = nlohmann::json::parse(*text);
    const auto& message = json.at("message");
    WorkerErrorRecord record;
    // PyTorch also accepts a plain string under "message" (errors recorded by older versions).
    if (message.is_string()) {
      record.message = message.get<std::string>();
      return record;
    }
    record.message = message.at("message").get<std::string>();
    if (message.contains("extraInfo")) {
      const auto& extra = message.at("extraInfo");
      record.callstack = extra.value("py_callstack", "");
      record.timestamp = std::stoll(extra.value("timestamp", "0"));
    }
    return record;
  } catch (const std::exception& e) {
    throw DataError("error file " + path + " is not torchelastic JSON: " + e.what());
  }
}

}  // namespace ddprun
