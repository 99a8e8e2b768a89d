#pragma once
// PyTorch's TCPStore wire vocabulary, in both dialects the store serves:
//  - 1.13: torch/csrc/distributed/c10d/TCPStore.cpp at v1.13.1 (QueryType SET=0 … DELETE_KEY=8).
//  - 2.x (2.2 and later): torch/csrc/distributed/c10d/TCPStoreBackend.hpp (VALIDATE=0, SET=1 … BARRIER=18);
//    a 2.x connection opens with VALIDATE + the 32-bit magic 0x3C85F7CE.
// Integers are the sender's native little-endian bytes; strings and byte vectors are a uint64 length
// followed by the bytes. docs/store.md gives the byte-level account.
#include <cstdint>
#include <optional>
#include <string>

namespace ddprun::store {

/// The store's operations, independent of dialect numbering.
enum class Command : uint8_t {
  kValidate,
  kSet,
  kCompareSet,
  kGet,
  kAdd,
  kCheck,
  kWait,
  kGetNumKeys,
  kWatchKey,  // 1.13 only; answered as registered, never fired
  kDeleteKey,
  kAppend,
  kMultiGet,
  kMultiSet,
  kCancelWait,
  kPing,
  kQueuePush,
  kQueuePop,
  kQueueLen,
  kListKeys,
  kBarrier,
};

/// Which numbering a connection speaks; decided by its first bytes.
enum class Dialect { kTorch113, kTorch2 };

/// VALIDATE's magic number (2.x).
inline constexpr uint32_t kValidateMagic = 0x3C85F7CE;

/// Reply bytes.
inline constexpr uint8_t kCheckReady = 0;
inline constexpr uint8_t kCheckNotReady = 1;
inline constexpr uint8_t kStopWaiting = 0;
inline constexpr uint8_t kWaitCanceled = 1;
inline constexpr uint8_t kWatchCallbackRegistered = 3;

/// Maps a command byte of `dialect` to a Command; nullopt for an unknown byte.
std::optional<Command> decodeCommand(Dialect dialect, uint8_t byte);

/// The command byte of `command` in `dialect`; nullopt when the dialect lacks it.
std::optional<uint8_t> encodeCommand(Dialect dialect, Command command);

/// Little-endian field encoding shared by requests and replies (the TCPStore wire format).
class WireWriter {
 public:
  WireWriter& u8(uint8_t value);
  WireWriter& u32(uint32_t value);
  WireWriter& i64(int64_t value);
  /// uint64 length, then the bytes (strings and byte vectors alike).
  WireWriter& bytes(const std::string& value);
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

/// Human-readable name, for logs and errors.
const char* commandName(Command command);

}  // namespace ddprun::store
