#include "launcher/watch/evidence/python_position.hpp"

#include <limits.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "common/elf_section.hpp"
#include "common/untrusted_file.hpp"

namespace ddprun::launcher {
namespace {

constexpr uint64_t kObjectType = 8;  // PyObject.ob_type
constexpr uint64_t kVarSize = 16;    // PyVarObject.ob_size: where a value's bytes start (kValueFields)

/// The bytes after an object's header (at ob_size's offset, 16) that hold what a loop changes, by type: a float,
/// the length of a list, str, bytes or bytearray (a str that grows in place keeps its address), a dict's size and
/// version tag, a set's fill and size, an iterator's position (and, for dict and set iterators, what they iterate);
/// kIntValue: an int's size and its 30-bit digits (a loop may change only its middle ones).
constexpr size_t kIntValue = 0;
constexpr std::pair<const char*, size_t> kValueFields[] = {
    {"PyLong_Type", kIntValue},  {"PyBool_Type", kIntValue}, {"PyFloat_Type", 8},          {"PyList_Type", 8},
    {"PyUnicode_Type", 8},       {"PyBytes_Type", 8},        {"PyByteArray_Type", 8},      {"PyDict_Type", 16},
    {"PySet_Type", 16},          {"PyListIter_Type", 8},     {"PyTupleIter_Type", 8},      {"PyRangeIter_Type", 32},
    {"PyLongRangeIter_Type", 8}, {"PyDictIterKey_Type", 24}, {"PyDictIterValue_Type", 24}, {"PyDictIterItem_Type", 24},
    {"PySetIter_Type", 24},      {"PyEnum_Type", 8},         {"PySeqIter_Type", 8},        {"PyUnicodeIter_Type", 8},
    {"PyBytesIter_Type", 8},     {"PyByteArrayIter_Type", 8}};

// Bounds on what one read follows: a corrupt, racing or merely huge state ends in a bounded read, never a long one.
constexpr size_t kMaxThreads = 4096;
constexpr size_t kMaxFrames = 256;
constexpr int64_t kMaxSlots = 1024;
constexpr int64_t kMaxLineTable = 64 << 10;
constexpr int64_t kMaxName = 4096;
/// Bytes of strings, line tables and values one read may fetch in all.
constexpr size_t kReadBudget = 1 << 20;
/// Of a huge int, at most this many digits are read (64 KiB).
constexpr int64_t kMaxIntDigits = 16384;
/// Once the read's budget cannot take a whole int any more, its first and last this many digits are read (a loop that
/// changes only digits between them reads as unchanged: at worst a computation is suspected of spinning, which is
/// reported, not acted on).
constexpr int64_t kIntDigitsEachEnd = 1024;
/// Code objects remembered across reads.
constexpr size_t kMaxCodes = 8192;
/// /proc/PID/maps is read up to this size (a process with a million mappings is read no further).
constexpr size_t kMaxMaps = 8 << 20;

bool readMemory(pid_t pid, uint64_t address, void* out, size_t size) {
  if (address == 0) return false;
  iovec local{out, size};
  iovec remote{reinterpret_cast<void*>(address), size};
  return process_vm_readv(pid, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(size);
}

template <typename T>
bool readValue(pid_t pid, uint64_t address, T& value) {
  return readMemory(pid, address, &value, sizeof(value));
}

template <typename T>
T at(const std::vector<char>& bytes, uint64_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(value));
  return value;
}

/// FNV-1a, 64 bits, continued from `hash` (kFnvOffsetBasis to start one).
constexpr uint64_t kFnvOffsetBasis = 14695981039346656037ULL;
uint64_t fnv1a(uint64_t hash, const void* data, size_t size) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) hash = (hash ^ bytes[i]) * 1099511628211ULL;
  return hash;
}

/// A file mapped at offset 0 whose name says it may hold the interpreter (python3.11, libpython3.11.so.1.0).
struct MappedFile {
  std::string path;
  uint64_t start = 0;
  ino_t inode = 0;
};

/// Each such file of `pid`, from /proc/PID/maps (proc(5): the path is the rest of the line, spaces included).
std::vector<MappedFile> interpreterFiles(pid_t pid) {
  std::vector<MappedFile> files;
  const auto maps = readUntrustedFile("/proc/" + std::to_string(pid) + "/maps", kMaxMaps);
  if (!maps) return files;
  size_t begin = 0;
  while (begin < maps->size()) {
    size_t end = maps->find('\n', begin);
    if (end == std::string::npos) end = maps->size();
    const std::string line = maps->substr(begin, end - begin);
    begin = end + 1;
    // address perms offset dev inode path
    char range[64] = {}, perms[8] = {}, device[16] = {};
    unsigned long long offset = 0, inode = 0;
    int consumed = 0;
    if (std::sscanf(line.c_str(), "%63s %7s %llx %15s %llu %n", range, perms, &offset, device, &inode, &consumed) < 5 ||
        consumed <= 0 || offset != 0) {
      continue;
    }
    const std::string path = line.substr(static_cast<size_t>(consumed));
    if (path.empty() || path[0] != '/') continue;
    const std::string base = path.substr(path.rfind('/') + 1);
    if (base.rfind("python", 0) != 0 && base.rfind("libpython", 0) != 0) continue;
    bool known = false;
    for (const auto& file : files) known = known || file.path == path;
    if (!known) files.push_back({path, std::strtoull(range, nullptr, 16), static_cast<ino_t>(inode)});
  }
  return files;
}

/// `pid`'s start time in clock ticks after boot (proc(5) /proc/pid/stat field 22); 0 when it is gone.
uint64_t startTime(pid_t pid) {
  const auto stat = readUntrustedFile("/proc/" + std::to_string(pid) + "/stat", 4096);
  if (!stat) return 0;
  const size_t end = stat->rfind(')');  // the command name may hold spaces and parentheses
  if (end == std::string::npos) return 0;
  const char* field = stat->c_str() + end + 1;
  for (int number = 3; number <= 22; ++number) {
    while (*field == ' ') ++field;
    if (number == 22) return std::strtoull(field, nullptr, 10);
    while (*field != ' ' && *field != '\0') ++field;
  }
  return 0;
}

/// A hash of `pid`'s auxiliary vector: the kernel writes it anew at every exec (with new addresses under ASLR).
uint64_t imageOf(pid_t pid) {
  const auto auxv = readUntrustedFile("/proc/" + std::to_string(pid) + "/auxv", 4096);
  return auxv ? fnv1a(kFnvOffsetBasis, auxv->data(), auxv->size()) : 0;
}

/// Reads a str object: its characters when it is a compact ASCII string, "?" for other strings; false when
/// `address` is no str.
bool readString(pid_t pid, const CPythonLayout& layout, uint64_t address, uint64_t unicodeType, std::string& text,
                size_t& budget) {
  std::vector<char> header(layout.asciiData);
  if (!readMemory(pid, address, header.data(), header.size()) || at<uint64_t>(header, kObjectType) != unicodeType) {
    return false;
  }
  const auto length = at<int64_t>(header, kVarSize);
  const auto state = at<uint32_t>(header, layout.unicodeState);
  const bool compactAscii = (state >> 5 & 1) && (state >> 6 & 1);
  if (!compactAscii || length < 0 || length > kMaxName || static_cast<size_t>(length) > budget) {
    text = "?";
    return true;
  }
  budget -= static_cast<size_t>(length);
  text.assign(static_cast<size_t>(length), '\0');
  return readMemory(pid, address + layout.asciiData, text.data(), text.size());
}

bool readBytes(pid_t pid, const CPythonLayout& layout, uint64_t address, uint64_t bytesType, std::string& data,
               size_t& budget) {
  std::vector<char> header(layout.bytesData);
  if (!readMemory(pid, address, header.data(), header.size()) || at<uint64_t>(header, kObjectType) != bytesType) {
    return false;
  }
  const auto size = at<int64_t>(header, kVarSize);
  if (size < 0 || size > kMaxLineTable || static_cast<size_t>(size) > budget) return false;
  budget -= static_cast<size_t>(size);
  data.assign(static_cast<size_t>(size), '\0');
  return readMemory(pid, address + layout.bytesData, data.data(), data.size());
}

/// Reads the `remote` ranges one after another into `values` (as long as all of them together), in as few system
/// calls as it can: a call stops at the first range it cannot read (whole ranges only, process_vm_readv(2)), which
/// stays zero, and the next call goes on after it.
void readRanges(pid_t pid, const std::vector<iovec>& remote, std::vector<char>& values) {
  size_t offset = 0;
  for (size_t done = 0; done < remote.size();) {
    const size_t batch = std::min<size_t>(remote.size() - done, IOV_MAX);
    iovec local{values.data() + offset, values.size() - offset};
    const ssize_t got = process_vm_readv(pid, &local, 1, remote.data() + done, batch, 0);
    size_t bytes = got > 0 ? static_cast<size_t>(got) : 0;
    size_t ranges = 0;
    for (; ranges < batch && bytes >= remote[done + ranges].iov_len; ++ranges) {
      bytes -= remote[done + ranges].iov_len;
      offset += remote[done + ranges].iov_len;
    }
    if (ranges < batch) offset += remote[done + ranges++].iov_len;  // the one it could not read
    done += ranges;
  }
}

}  // namespace

std::string PythonPosition::where() const {
  if (frames.empty()) return "";
  const PythonFrame& frame = frames.front();
  return "File \"" + frame.file + "\", line " + std::to_string(frame.line) + ", in " + frame.function;
}

PythonPositionReader::Interpreter PythonPositionReader::find(pid_t pid) const {
  Interpreter found;
  for (const MappedFile& file : interpreterFiles(pid)) {
    std::map<std::string, uint64_t> symbols{{"_PyRuntime", 0}, {"Py_Version", 0}, {"PyCode_Type", 0}};
    for (const auto& [type, bytes] : kValueFields) symbols[type] = 0;
    uint64_t lowestLoad = 0;
    std::string why;
    if (!readDynamicSymbols(file.path, file.inode, symbols, lowestLoad, why)) {
      found.status = PythonPosition::Status::kUnreadable;
      found.why = file.path + " cannot be read: " + why;
      continue;  // another mapped file may be the interpreter
    }
    if (symbols["_PyRuntime"] == 0) continue;
    const uint64_t bias = file.start - lowestLoad;
    found.status = PythonPosition::Status::kUnreadable;
    unsigned long version = 0;
    if (symbols["Py_Version"] == 0) {
      found.why = "a CPython older than 3.11 (" + file.path + "), whose frames ddprun cannot read (it reads " +
                  cpythonVersionsRead() + ")";
      return found;
    }
    if (!readValue(pid, bias + symbols["Py_Version"], version)) {
      found.why = "its memory cannot be read (" + std::string(std::strerror(errno)) + ")";
      return found;
    }
    found.layout = cpythonLayout(static_cast<unsigned>(version >> 16));
    if (found.layout == nullptr) {
      found.why = "CPython " + std::to_string(version >> 24) + "." + std::to_string((version >> 16) & 0xff) + " (" +
                  file.path + "), whose frames ddprun cannot read (it reads " + cpythonVersionsRead() + ")";
      return found;
    }
    found.status = PythonPosition::Status::kRead;
    found.why.clear();
    found.runtime = bias + symbols["_PyRuntime"];
    found.codeType = bias + symbols["PyCode_Type"];
    found.unicodeType = bias + symbols["PyUnicode_Type"];
    found.bytesType = bias + symbols["PyBytes_Type"];
    for (const auto& [type, bytes] : kValueFields) {
      if (symbols[type] != 0) found.valueBytes[bias + symbols[type]] = bytes;
    }
    return found;
  }
  return found;
}

size_t PythonPositionReader::hashObjects(pid_t pid, const Interpreter& interpreter,
                                         const std::vector<uint64_t>& objects, uint64_t& hash, size_t budget) const {
  // Their types (and ob_size, used only for an int), then the value of those whose value lives in the object
  // itself. Bytes past an object's end are not hashed: they may belong to another object that changes (None is 16
  // bytes long).
  constexpr size_t kHeader = 2 * sizeof(uint64_t);
  std::vector<iovec> remote;
  for (uint64_t object : objects) {
    if (object != 0) remote.push_back({reinterpret_cast<void*>(object + kObjectType), kHeader});
  }
  std::vector<char> headers(remote.size() * kHeader);
  readRanges(pid, remote, headers);
  std::vector<iovec> values;
  const auto add = [&values, &budget](uint64_t address, size_t size) {
    if (size > budget) return;
    budget -= size;
    values.push_back({reinterpret_cast<void*>(address), size});
  };
  for (size_t i = 0; i < remote.size(); ++i) {
    const uint64_t object = reinterpret_cast<uint64_t>(remote[i].iov_base) - kObjectType;
    const auto type = at<uint64_t>(headers, i * kHeader);
    hash = fnv1a(hash, &type, sizeof(type));
    const auto known = interpreter.valueBytes.find(type);
    if (known == interpreter.valueBytes.end()) continue;
    if (known->second != kIntValue) {
      add(object + kVarSize, known->second);
      continue;
    }
    // Every digit while the budget lasts (a loop may change only the middle ones), then its two ends.
    const int64_t digits =
        std::min(std::max<int64_t>(std::llabs(at<int64_t>(headers, i * kHeader + 8)), 1), kMaxIntDigits);
    const size_t whole = sizeof(int64_t) + static_cast<size_t>(digits) * sizeof(uint32_t);
    if (whole <= budget || digits <= 2 * kIntDigitsEachEnd) {
      add(object + kVarSize, whole);
      continue;
    }
    const size_t end = static_cast<size_t>(kIntDigitsEachEnd) * sizeof(uint32_t);
    add(object + kVarSize, sizeof(int64_t) + end);
    add(object + kVarSize + whole - end, end);
  }
  size_t total = 0;
  for (const iovec& value : values) total += value.iov_len;
  std::vector<char> bytes(total);
  readRanges(pid, values, bytes);
  hash = fnv1a(hash, bytes.data(), bytes.size());
  return budget;
}

bool PythonPositionReader::readCode(pid_t pid, const Interpreter& interpreter, uint64_t address,
                                    const std::vector<char>& header, Code*& code, size_t& budget) {
  const CPythonLayout& layout = *interpreter.layout;
  // The part of the header that names the strings and the first line: a code object freed and another made at its
  // address differs there.
  const std::string key(header.data() + layout.codeStackSize, layout.codeLineTable + 8 - layout.codeStackSize);
  auto known = codes_.find({pid, address});
  if (known != codes_.end() && known->second.header == key) {
    code = &known->second;
    return true;
  }
  Code read;
  read.header = key;
  if (!readString(pid, layout, at<uint64_t>(header, layout.codeFilename), interpreter.unicodeType, read.names.file,
                  budget) ||
      !readString(pid, layout, at<uint64_t>(header, layout.codeQualname), interpreter.unicodeType, read.names.function,
                  budget) ||
      !readBytes(pid, layout, at<uint64_t>(header, layout.codeLineTable), interpreter.bytesType, read.lineTable,
                 budget)) {
    return false;
  }
  if (codes_.size() >= kMaxCodes) codes_.clear();
  code = &(codes_[{pid, address}] = std::move(read));
  return true;
}

PythonPosition PythonPositionReader::read(pid_t pid) {
  const uint64_t started = startTime(pid);
  const uint64_t image = imageOf(pid);
  auto known = interpreters_.find(pid);
  if (known == interpreters_.end() || known->second.started != started || known->second.image != image) {
    for (auto it = codes_.lower_bound({pid, 0}); it != codes_.end() && it->first.first == pid;) it = codes_.erase(it);
    Interpreter found = find(pid);
    found.started = started;
    found.image = image;
    // A program that is no Python now may exec one (a wrapper): only an interpreter found is remembered.
    if (found.status == PythonPosition::Status::kNotPython) {
      if (known != interpreters_.end()) interpreters_.erase(known);
      return {};
    }
    known = interpreters_.insert_or_assign(pid, std::move(found)).first;
  }
  const Interpreter& interpreter = known->second;
  PythonPosition position;
  position.status = interpreter.status;
  position.why = interpreter.why;
  if (interpreter.status != PythonPosition::Status::kRead) return position;
  const CPythonLayout& layout = *interpreter.layout;

  const auto moved = [&position](const char* why) {
    position.status = PythonPosition::Status::kMoved;
    position.why = why;
    position.frames.clear();
    return position;
  };
  uint64_t interp = 0;
  uint64_t thread = 0;
  if (!readValue(pid, interpreter.runtime + layout.runtimeMainInterpreter, interp) ||
      !readValue(pid, interp + layout.interpreterThreadsHead, thread)) {
    return moved("its interpreter cannot be read");
  }
  // The thread list is newest first; the main thread is the one whose native id is the process's.
  for (size_t n = 0; thread != 0; ++n) {
    uint64_t nativeId = 0;
    if (n == kMaxThreads || !readValue(pid, thread + layout.threadNativeId, nativeId)) {
      return moved("its threads changed");
    }
    if (nativeId == static_cast<uint64_t>(pid)) break;
    if (!readValue(pid, thread + layout.threadNext, thread)) return moved("its threads changed");
  }
  uint64_t cframe = 0;
  uint64_t frame = 0;
  if (thread == 0) return moved("its main thread has no Python state");
  if (!readValue(pid, thread + layout.threadCFrame, cframe) ||
      !readValue(pid, cframe + layout.cframeCurrentFrame, frame)) {
    return moved("its frames changed");
  }
  size_t budget = kReadBudget;
  uint64_t state = kFnvOffsetBasis;
  std::vector<char> header(layout.frameLocals);
  std::vector<char> codeHeader(layout.codeHeader);
  for (size_t depth = 0; frame != 0; ++depth) {
    if (depth == kMaxFrames || !readMemory(pid, frame, header.data(), header.size())) {
      return moved("its frames changed");
    }
    const auto codeAddress = at<uint64_t>(header, layout.frameCode);
    Code* code = nullptr;
    if (!readMemory(pid, codeAddress, codeHeader.data(), codeHeader.size()) ||
        at<uint64_t>(codeHeader, kObjectType) != interpreter.codeType ||
        !readCode(pid, interpreter, codeAddress, codeHeader, code, budget)) {
      return moved("its frames changed");
    }
    PythonFrame described = code->names;
    const uint64_t prevInstr = at<uint64_t>(header, layout.framePrevInstr);
    const auto instruction = static_cast<int64_t>(prevInstr - (codeAddress + layout.codeInstructions));
    described.line = layout.lineAt(code->lineTable, at<int32_t>(codeHeader, layout.codeFirstLine),
                                   static_cast<int>(instruction / 2));
    state = fnv1a(state, &codeAddress, sizeof(codeAddress));
    state = fnv1a(state, &described.line, sizeof(described.line));
    if (depth == 0) {
      position.instruction =
          fnv1a(fnv1a(kFnvOffsetBasis, &codeAddress, sizeof(codeAddress)), &instruction, sizeof(instruction));
      state = fnv1a(state, &instruction, sizeof(instruction));
      uint8_t opcode = 0;
      position.backwardJump = readValue(pid, prevInstr, opcode) && layout.jumpsBackward(opcode);
      // The innermost frame's variables and evaluation stack (whose depth the running frame does not store: all its
      // slots; a slot above the top holds what was last popped): a loop that computes rebinds them or pushes new
      // values, one that waits for something does not.
      const int64_t count = static_cast<int64_t>(at<int32_t>(codeHeader, layout.codeLocalCount)) +
                            at<int32_t>(codeHeader, layout.codeStackSize);
      if (count < 0 || count > kMaxSlots) return moved("its frames changed");
      std::vector<uint64_t> locals(static_cast<size_t>(count));
      if (!locals.empty() &&
          !readMemory(pid, frame + layout.frameLocals, locals.data(), locals.size() * sizeof(uint64_t))) {
        return moved("its frames changed");
      }
      state = fnv1a(state, locals.data(), locals.size() * sizeof(uint64_t));
      budget = hashObjects(pid, interpreter, locals, state, budget);
    }
    position.frames.push_back(std::move(described));
    frame = at<uint64_t>(header, layout.framePrevious);
  }
  position.state = state;
  lastReadBytes_ = kReadBudget - budget;
  return position;
}

}  // namespace ddprun::launcher
