#include "common/error_file.hpp"

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <vector>

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

namespace {

/// Keeps only torchelastic's fields while nlohmann's SAX parser streams through the file, and stops it (returns
/// false) at the first value nested deeper than kMaxErrorFileDepth or past kMaxErrorFileValues values.
class ErrorFileFields : public nlohmann::json_sax<nlohmann::json> {
 public:
  WorkerErrorRecord record;
  bool sawMessage = false;
  std::string refusal;  ///< why the parse was stopped; "" when it was not

  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t v) override { return number(v); }
  bool number_unsigned(number_unsigned_t v) override {
    return number(v > static_cast<number_unsigned_t>(INT64_MAX) ? -1 : static_cast<int64_t>(v));
  }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool string(string_t& text) override {
    if (!value()) return false;
    if (at({"message"})) {  // an older PyTorch's plain string
      record.message = std::move(text);
      sawMessage = true;
    } else if (at({"message", "message"})) {
      record.message = std::move(text);
      sawMessage = true;
    } else if (at({"message", "extraInfo", "py_callstack"})) {
      record.callstack = std::move(text);
    } else if (at({"message", "extraInfo", "timestamp"})) {
      char* end = nullptr;
      errno = 0;
      const long long seconds = std::strtoll(text.c_str(), &end, 10);
      if (errno == 0 && end != text.c_str() && *end == '\0') setTimestamp(seconds);
    }
    return true;
  }
  bool start_object(std::size_t) override { return open("{"); }
  bool key(string_t& name) override {
    path_.back() = std::move(name);
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open("["); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) override {
    if (refusal.empty()) refusal = "not torchelastic JSON (byte " + std::to_string(position) + "): " + e.what();
    return false;
  }

 private:
  bool value() {
    if (++values_ <= kMaxErrorFileValues) return true;
    refusal = "more than " + std::to_string(kMaxErrorFileValues) + " values";
    return false;
  }
  bool number(int64_t v) {
    if (!value()) return false;
    if (at({"message", "extraInfo", "timestamp"})) setTimestamp(v);
    return true;
  }
  void setTimestamp(int64_t seconds) {
    if (seconds > 0 && seconds <= kMaxErrorFileTimestamp) record.timestamp = seconds;
  }
  bool open(const char* kind) {
    if (!value()) return false;
    if (static_cast<int>(path_.size()) >= kMaxErrorFileDepth) {
      refusal = "nested deeper than " + std::to_string(kMaxErrorFileDepth) + " levels";
      return false;
    }
    path_.emplace_back(kind);  // an object's key replaces it
    return true;
  }
  bool close() {
    path_.pop_back();
    return true;
  }
  /// True when the value being read sits at `keys` (objects only) from the top.
  bool at(std::initializer_list<const char*> keys) const {
    if (path_.size() != keys.size()) return false;
    size_t i = 0;
    for (const char* k : keys) {
      if (path_[i++] != k) return false;
    }
    return true;
  }

  std::vector<std::string> path_;  ///< the key of each open object ("[" for an array), outermost first
  size_t values_ = 0;
};

}  // namespace

std::optional<WorkerErrorRecord> readErrorFile(const std::string& path) {
  // The worker controls this path: it may be a FIFO, a link or a huge file. Read it without blocking or
  // following a link, up to a bound (one byte more tells a file over it).
  const auto text = readUntrustedFile(path, kMaxErrorFileBytes + 1);
  if (!text) return std::nullopt;
  if (text->size() > kMaxErrorFileBytes) {
    throw DataError("error file " + path + " is larger than " + std::to_string(kMaxErrorFileBytes >> 20) +
                    " MiB: not read");
  }
  ErrorFileFields fields;
  const bool parsed = nlohmann::json::sax_parse(text->data(), text->data() + text->size(), &fields);
  if (!parsed || !fields.refusal.empty()) {
    throw DataError("error file " + path + " is " +
                    (fields.refusal.empty() ? std::string("not torchelastic JSON") : fields.refusal));
  }
  if (!fields.sawMessage) throw DataError("error file " + path + " is not torchelastic JSON: it has no message");
  return std::move(fields.record);
}

}  // namespace ddprun
