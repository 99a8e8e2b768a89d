#include "store/request_parser.hpp"

#include <algorithm>
#include <cstring>

namespace ddprun::store {

RequestParser::Field RequestParser::fieldAt(size_t index) const {
  switch (request_.command) {
    case Command::kValidate:
    case Command::kPing: return index == 0 ? Field::kU32 : Field::kDone;
    case Command::kSet:
    case Command::kAppend:
    case Command::kQueuePush: return index == 0 ? Field::kKey : index == 1 ? Field::kValue : Field::kDone;
    case Command::kCompareSet: return index == 0 ? Field::kKey : index <= 2 ? Field::kValue : Field::kDone;
    case Command::kGet:
    case Command::kDeleteKey:
    case Command::kWatchKey:
    case Command::kQueuePop:
    case Command::kQueueLen: return index == 0 ? Field::kKey : Field::kDone;
    case Command::kAdd:
    case Command::kBarrier: return index == 0 ? Field::kKey : index == 1 ? Field::kI64 : Field::kDone;
    case Command::kCheck:
    case Command::kWait:
    case Command::kMultiGet: return index == 0 ? Field::kCount : index <= count_ ? Field::kKey : Field::kDone;
    case Command::kMultiSet:
      if (index == 0) return Field::kCount;
      if (index > 2 * count_) return Field::kDone;
      return index % 2 == 1 ? Field::kKey : Field::kValue;
    case Command::kGetNumKeys:
    case Command::kCancelWait:
    case Command::kListKeys: return Field::kDone;
  }
  return Field::kDone;
}

bool RequestParser::beginField() {
  field_ = fieldAt(fieldIndex_);
  if (field_ == Field::kDone) return false;
  step_ = field_ == Field::kU32 || field_ == Field::kI64 || field_ == Field::kCount ? Step::kFixed : Step::kLength;
  scratchHave_ = 0;
  scratchNeed_ = field_ == Field::kU32 ? 4 : 8;
  return true;
}

RequestParser::Status RequestParser::fail(std::string why, const char* limit) {
  error_ = std::string(commandName(request_.command)) + ": " + std::move(why);
  limitName_ = limit;
  return Status::kBad;
}

std::string RequestParser::replacedKey() const {
  switch (request_.command) {
    case Command::kSet:
    case Command::kCompareSet: return request_.keys.empty() ? std::string() : request_.keys[0];
    case Command::kMultiSet:  // key i precedes value i
      return request_.keys.size() > request_.values.size() ? request_.keys.back() : std::string();
    default:  // APPEND and QUEUE_PUSH add to what is there
      return std::string();
  }
}

bool RequestParser::beginString(uint64_t length) {
  auto& list = field_ == Field::kKey ? request_.keys : request_.values;
  list.emplace_back();
  target_ = &list.back();
  stringLeft_ = length;
  step_ = Step::kBytes;
  return length > 0;
}

namespace {

/// Whether `command` carries a list of keys and nothing else (bounded by max-key-list-bytes).
bool isKeyList(Command command) {
  return command == Command::kCheck || command == Command::kWait || command == Command::kMultiGet;
}

}  // namespace

uint64_t RequestParser::requestCap() const {
  return isKeyList(request_.command) ? std::min(limits_.maxRequestBytes, limits_.maxKeyListBytes)
                                     : limits_.maxRequestBytes;
}

const char* RequestParser::requestCapName() const {
  return requestCap() < limits_.maxRequestBytes ? "max-key-list-bytes" : "max-request-bytes";
}

RequestParser::Status RequestParser::feed(std::string_view input, size_t& consumed) {
  size_t pos = 0;
  auto done = [&](Status status) {
    consumed += pos;
    return status;
  };
  while (pos < input.size()) {
    if (step_ == Step::kCommand) {
      const auto byte = static_cast<uint8_t>(input[pos++]);
      auto command = decodeCommand(dialect_, byte);
      if (!command) {
        error_ = "unknown command byte " + std::to_string(byte) +
                 (dialect_ == Dialect::kTorch113 ? " (torch 1.13 dialect)" : " (torch 2.x dialect)");
        return done(Status::kBad);
      }
      request_ = Request{};
      request_.command = *command;
      fieldIndex_ = 0;
      count_ = 0;
      requestBytes_ = 1;
      if (!beginField()) return done(Status::kOk);
      continue;
    }
    if (step_ == Step::kBytes) {
      const size_t take = static_cast<size_t>(std::min<uint64_t>(stringLeft_, input.size() - pos));
      target_->append(input.data() + pos, take);
      pos += take;
      requestBytes_ += take;
      stringLeft_ -= take;
      if (stringLeft_ > 0) continue;
      ++fieldIndex_;
      if (!beginField()) return done(Status::kOk);
      continue;
    }
    // A fixed-size integer (a field, or a string's length): assemble it across feeds.
    const size_t take = std::min(scratchNeed_ - scratchHave_, input.size() - pos);
    std::memcpy(scratch_ + scratchHave_, input.data() + pos, take);
    scratchHave_ += take;
    pos += take;
    requestBytes_ += take;
    if (scratchHave_ < scratchNeed_) continue;
    uint64_t raw = 0;
    std::memcpy(&raw, scratch_, scratchNeed_);  // native little-endian, as c10d writes it
    if (step_ == Step::kLength) {
      const bool isKey = field_ == Field::kKey;
      const uint64_t cap = isKey ? limits_.maxKeyBytes : limits_.maxValueBytes;
      const char* what = isKey ? "key" : "value";
      if (raw > cap) {
        return done(fail(
            std::string(what) + " of " + std::to_string(raw) + " bytes exceeds the limit of " + std::to_string(cap),
            isKey ? "max-key-bytes" : "max-value-bytes"));
      }
      const uint64_t requestLimit = requestCap();
      if (raw > requestLimit - std::min(requestBytes_, requestLimit)) {
        return done(fail("request of more than " + std::to_string(requestLimit) + " bytes", requestCapName()));
      }
      if (!isKey && valueRoom_) {
        // A value that cannot fit even in place of the key's old one is refused before its bytes arrive.
        const uint64_t room = valueRoom_(replacedKey());
        if (raw > room) {
          return done(fail("a value of " + std::to_string(raw) + " bytes, over the " + std::to_string(room) +
                               " bytes left in the store's budget",
                           "memory-budget-bytes"));
        }
      }
      if (beginString(raw)) continue;
      ++fieldIndex_;
      if (!beginField()) return done(Status::kOk);
      continue;
    }
    if (field_ == Field::kU32) {
      uint32_t word = 0;
      std::memcpy(&word, scratch_, 4);
      request_.word = word;
    } else if (field_ == Field::kI64) {
      request_.integer = static_cast<int64_t>(raw);
    } else {  // kCount
      if (raw > limits_.maxKeysPerRequest) {
        return done(fail(
            "key count " + std::to_string(raw) + " exceeds the limit of " + std::to_string(limits_.maxKeysPerRequest),
            "max-keys-per-request"));
      }
      // Every key costs at least its 8-byte length (MULTI_SET: a value's length too).
      const uint64_t perKey = request_.command == Command::kMultiSet ? 16 : 8;
      if (raw * perKey > requestCap()) {
        return done(
            fail("key count " + std::to_string(raw) + " cannot fit in " + std::to_string(requestCap()) + " bytes",
                 requestCapName()));
      }
      count_ = raw;
    }
    ++fieldIndex_;
    if (!beginField()) return done(Status::kOk);
  }
  return done(Status::kNeedMore);
}

Request RequestParser::takeRequest() {
  step_ = Step::kCommand;
  requestBytes_ = 0;
  target_ = nullptr;
  Request out = std::move(request_);
  request_ = Request{};
  return out;
}

std::optional<Dialect> detectDialect(std::string_view firstBytes) {
  if (firstBytes.empty()) return std::nullopt;
  if (firstBytes[0] != 0) return Dialect::kTorch113;
  const unsigned char magic[5] = {0x00, 0xCE, 0xF7, 0x85, 0x3C};
  const size_t n = std::min<size_t>(firstBytes.size(), 5);
  if (std::memcmp(firstBytes.data(), magic, n) != 0) return Dialect::kTorch113;
  if (n < 5) return std::nullopt;
  return Dialect::kTorch2;
}

}  // namespace ddprun::store
