#include "launcher/watch/python_position.hpp"

#include <elf.h>
#include <limits.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

namespace ddprun::launcher {
namespace {

// CPython 3.11's layout on 64-bit Linux (see the header for the files). Checked by python_position_test against the
// interpreter itself.
constexpr uint64_t kRuntimeMainInterpreter = 48;  // _PyRuntimeState.interpreters.main
constexpr uint64_t kInterpreterThreadsHead = 16;  // PyInterpreterState.threads.head
constexpr uint64_t kThreadNext = 8;               // PyThreadState.next
constexpr uint64_t kThreadCFrame = 56;            // PyThreadState.cframe
constexpr uint64_t kThreadNativeId = 160;         // PyThreadState.native_thread_id
constexpr uint64_t kCFrameCurrentFrame = 8;       // _PyCFrame.current_frame
constexpr uint64_t kFrameCode = 32;               // _PyInterpreterFrame.f_code
constexpr uint64_t kFramePrevious = 48;           // _PyInterpreterFrame.previous
constexpr uint64_t kFramePrevInstr = 56;          // _PyInterpreterFrame.prev_instr
constexpr uint64_t kFrameLocals = 72;             // _PyInterpreterFrame.localsplus
constexpr uint64_t kObjectType = 8;               // PyObject.ob_type
constexpr uint64_t kVarSize = 16;                 // PyVarObject.ob_size
constexpr uint64_t kCodeFirstLine = 72;           // PyCodeObject.co_firstlineno (int)
constexpr uint64_t kCodeStackSize = 68;           // PyCodeObject.co_stacksize (int)
constexpr uint64_t kCodeLocalCount = 76;          // PyCodeObject.co_nlocalsplus (int)
constexpr uint64_t kCodeFilename = 112;           // PyCodeObject.co_filename
constexpr uint64_t kCodeQualname = 128;           // PyCodeObject.co_qualname
constexpr uint64_t kCodeLineTable = 136;          // PyCodeObject.co_linetable
constexpr uint64_t kCodeInstructions = 184;       // PyCodeObject.co_code_adaptive
constexpr uint64_t kCodeHeader = 192;
constexpr uint64_t kBytesData = 32;     // PyBytesObject.ob_sval
constexpr uint64_t kUnicodeState = 32;  // PyASCIIObject.state: interned:2 kind:3 compact:1 ascii:1 ready:1
constexpr uint64_t kAsciiData = 48;     // a compact ASCII string's characters follow its PyASCIIObject
constexpr unsigned kVersion311 = 0x030B;

/// The bytes after an object's header (at ob_size's offset, 16) that hold what a loop changes, by type: a float,
/// the length of a list, str, bytes or bytearray (a str that grows in place keeps its address), a dict's size and
/// version tag, a set's fill and size; kIntValue: an int's size and every 30-bit digit (a loop may change only
/// its middle ones).
constexpr size_t kIntValue = 0;
constexpr std::pair<const char*, size_t> kValueFields[] = {
    {"PyLong_Type", kIntValue}, {"PyBool_Type", kIntValue}, {"PyFloat_Type", 8},
    {"PyList_Type", 8},         {"PyUnicode_Type", 8},      {"PyBytes_Type", 8},
    {"PyByteArray_Type", 8},    {"PyDict_Type", 16},        {"PySet_Type", 16}};
/// Of a huge int, at most this many digits are read (64 KiB).
constexpr int64_t kMaxIntDigits = 16384;

// Bounds on what one read follows: a corrupt or racing chain ends in a failed read, never a long one.
constexpr size_t kMaxThreads = 4096;
constexpr size_t kMaxFrames = 256;
constexpr int64_t kMaxSlots = 1024;
constexpr int64_t kMaxLineTable = 1 << 20;
constexpr int64_t kMaxName = 4096;

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

/// The symbols `names` defined in `path`'s dynamic symbol table (value as linked) and the lowest address its
/// loadable segments are linked at; false when it is no 64-bit ELF file.
bool readDynamicSymbols(const std::string& path, std::map<std::string, uint64_t>& symbols, uint64_t& lowestLoad) {
  std::ifstream in(path, std::ios::binary);
  Elf64_Ehdr header{};
  if (!in.read(reinterpret_cast<char*>(&header), sizeof(header))) return false;
  if (std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0 || header.e_ident[EI_CLASS] != ELFCLASS64) return false;
  lowestLoad = UINT64_MAX;
  for (unsigned i = 0; i < header.e_phnum; ++i) {
    Elf64_Phdr segment{};
    in.seekg(static_cast<std::streamoff>(header.e_phoff + i * sizeof(segment)));
    if (!in.read(reinterpret_cast<char*>(&segment), sizeof(segment))) return false;
    if (segment.p_type == PT_LOAD) lowestLoad = std::min<uint64_t>(lowestLoad, segment.p_vaddr & ~uint64_t{0xfff});
  }
  std::vector<Elf64_Shdr> sections(header.e_shnum);
  in.seekg(static_cast<std::streamoff>(header.e_shoff));
  if (sections.empty() || !in.read(reinterpret_cast<char*>(sections.data()), sections.size() * sizeof(Elf64_Shdr))) {
    return false;
  }
  for (const Elf64_Shdr& section : sections) {
    if (section.sh_type != SHT_DYNSYM || section.sh_link >= sections.size()) continue;
    const Elf64_Shdr& strings = sections[section.sh_link];
    std::string names(strings.sh_size, '\0');
    std::vector<Elf64_Sym> table(section.sh_size / sizeof(Elf64_Sym));
    in.seekg(static_cast<std::streamoff>(strings.sh_offset));
    in.read(names.data(), static_cast<std::streamsize>(names.size()));
    in.seekg(static_cast<std::streamoff>(section.sh_offset));
    in.read(reinterpret_cast<char*>(table.data()), static_cast<std::streamsize>(table.size() * sizeof(Elf64_Sym)));
    if (!in) return false;
    for (const Elf64_Sym& symbol : table) {
      if (symbol.st_shndx == SHN_UNDEF || symbol.st_name >= names.size()) continue;
      const char* name = names.c_str() + symbol.st_name;
      if (symbols.count(name) && symbols[name] == 0) symbols[name] = symbol.st_value;
    }
  }
  return true;
}

/// Each mapped file of `pid` whose name says it may hold the interpreter (python3.11, libpython3.11.so.1.0), with
/// the address its first mapping (file offset 0) starts at.
std::vector<std::pair<std::string, uint64_t>> interpreterFiles(pid_t pid) {
  std::vector<std::pair<std::string, uint64_t>> files;
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream fields(line);
    std::string range, perms, offset, device, inode, path;
    fields >> range >> perms >> offset >> device >> inode >> path;
    if (path.empty() || path[0] != '/' || std::stoull(offset, nullptr, 16) != 0) continue;
    const std::string base = path.substr(path.rfind('/') + 1);
    if (base.rfind("python", 0) != 0 && base.rfind("libpython", 0) != 0) continue;
    bool known = false;
    for (const auto& file : files) known = known || file.first == path;
    if (!known) files.emplace_back(path, std::stoull(range, nullptr, 16));
  }
  return files;
}

/// `pid`'s start time in clock ticks after boot (proc(5) /proc/pid/stat field 22); 0 when it is gone.
uint64_t startTime(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t end = stat.rfind(')');  // the command name may hold spaces and parentheses
  if (end == std::string::npos) return 0;
  std::istringstream fields(stat.substr(end + 2));
  std::string field;
  for (int number = 3; number <= 22 && fields >> field; ++number) {
    if (number == 22) return std::stoull(field);
  }
  return 0;
}

/// FNV-1a, 64 bits, continued from `hash` (kFnvOffsetBasis to start one).
constexpr uint64_t kFnvOffsetBasis = 14695981039346656037ULL;
uint64_t fnv1a(uint64_t hash, const void* data, size_t size) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) hash = (hash ^ bytes[i]) * 1099511628211ULL;
  return hash;
}

/// An unsigned varint of the line table: 6 bits a byte, bit 6 set while more follow.
unsigned readVarint(const std::string& table, size_t& i) {
  unsigned value = 0;
  unsigned shift = 0;
  while (i < table.size()) {
    const auto byte = static_cast<unsigned char>(table[i++]);
    value |= (byte & 63u) << shift;
    shift += 6;
    if (!(byte & 64) || shift > 30) break;
  }
  return value;
}

int readSignedVarint(const std::string& table, size_t& i) {
  const unsigned value = readVarint(table, i);
  return (value & 1) ? -static_cast<int>(value >> 1) : static_cast<int>(value >> 1);
}

}  // namespace

std::string PythonPosition::where() const {
  if (frames.empty()) return "";
  const PythonFrame& frame = frames.front();
  return "File \"" + frame.file + "\", line " + std::to_string(frame.line) + ", in " + frame.function;
}

int pythonLineAt(const std::string& table, int firstLine, int offset) {
  if (offset < 0) return firstLine;
  int line = firstLine;
  int unit = 0;
  size_t i = 0;
  while (i < table.size()) {
    const auto first = static_cast<unsigned char>(table[i++]);
    const unsigned code = (first >> 3) & 15;
    const int length = (first & 7) + 1;
    bool known = true;
    if (code == 15) {
      known = false;  // no location
    } else if (code == 14) {
      line += readSignedVarint(table, i);
      readVarint(table, i);  // end line delta
      readVarint(table, i);  // column + 1
      readVarint(table, i);  // end column + 1
    } else if (code == 13) {
      line += readSignedVarint(table, i);  // no column
    } else if (code >= 10) {
      line += static_cast<int>(code) - 10;  // one-line form: column and end column follow
      i += 2;
    } else {
      i += 1;  // short form: same line, a column byte
    }
    if (offset < unit + length) return known ? line : 0;
    unit += length;
  }
  return 0;
}

PythonPositionReader::Interpreter PythonPositionReader::find(pid_t pid) const {
  Interpreter found;
  for (const auto& [path, start] : interpreterFiles(pid)) {
    std::map<std::string, uint64_t> symbols{{"_PyRuntime", 0}, {"Py_Version", 0}, {"PyCode_Type", 0}};
    for (const auto& [type, bytes] : kValueFields) symbols[type] = 0;
    uint64_t lowestLoad = 0;
    if (!readDynamicSymbols(path, symbols, lowestLoad) || symbols["_PyRuntime"] == 0) continue;
    const uint64_t bias = start - lowestLoad;
    found.status = PythonPosition::Status::kUnreadable;
    unsigned long version = 0;
    if (symbols["Py_Version"] == 0) {
      found.why = "a CPython older than 3.11 (" + path + ")";
      return found;
    }
    if (!readValue(pid, bias + symbols["Py_Version"], version)) {
      found.why = "its memory cannot be read (" + std::string(std::strerror(errno)) + ")";
      return found;
    }
    if ((version >> 16) != kVersion311) {
      found.why = "CPython " + std::to_string(version >> 24) + "." + std::to_string((version >> 16) & 0xff) +
                  ", whose frames ddprun cannot read (it reads 3.11's)";
      return found;
    }
    found.status = PythonPosition::Status::kRead;
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

namespace {

/// Reads a str object: its characters when it is a compact ASCII string, "?" for other strings; false when
/// `address` is no str.
bool readString(pid_t pid, uint64_t address, uint64_t unicodeType, std::string& text) {
  std::vector<char> header(kAsciiData);
  if (!readMemory(pid, address, header.data(), header.size()) || at<uint64_t>(header, kObjectType) != unicodeType) {
    return false;
  }
  const auto length = at<int64_t>(header, kVarSize);
  const auto state = at<uint32_t>(header, kUnicodeState);
  const bool compactAscii = (state >> 5 & 1) && (state >> 6 & 1);
  if (!compactAscii || length < 0 || length > kMaxName) {
    text = "?";
    return true;
  }
  text.assign(static_cast<size_t>(length), '\0');
  return readMemory(pid, address + kAsciiData, text.data(), text.size());
}

bool readBytes(pid_t pid, uint64_t address, uint64_t bytesType, std::string& data) {
  std::vector<char> header(kBytesData);
  if (!readMemory(pid, address, header.data(), header.size()) || at<uint64_t>(header, kObjectType) != bytesType) {
    return false;
  }
  const auto size = at<int64_t>(header, kVarSize);
  if (size < 0 || size > kMaxLineTable) return false;
  data.assign(static_cast<size_t>(size), '\0');
  return readMemory(pid, address + kBytesData, data.data(), data.size());
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

void PythonPositionReader::Interpreter::hashObjects(pid_t pid, const std::vector<uint64_t>& objects,
                                                    uint64_t& hash) const {
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
  for (size_t i = 0; i < remote.size(); ++i) {
    const uint64_t object = reinterpret_cast<uint64_t>(remote[i].iov_base) - kObjectType;
    const auto type = at<uint64_t>(headers, i * kHeader);
    hash = fnv1a(hash, &type, sizeof(type));
    const auto known = valueBytes.find(type);
    if (known == valueBytes.end()) continue;
    size_t size = known->second;
    if (size == kIntValue) {
      const int64_t digits =
          std::min<int64_t>(std::llabs(at<int64_t>(headers, i * kHeader + sizeof(uint64_t))), kMaxIntDigits);
      size = sizeof(int64_t) + static_cast<size_t>(std::max<int64_t>(digits, 1)) * sizeof(uint32_t);
    }
    values.push_back({reinterpret_cast<void*>(object + kVarSize), size});
  }
  size_t total = 0;
  for (const iovec& value : values) total += value.iov_len;
  std::vector<char> bytes(total);
  readRanges(pid, values, bytes);
  hash = fnv1a(hash, bytes.data(), bytes.size());
}

PythonPosition PythonPositionReader::read(pid_t pid) {
  const uint64_t started = startTime(pid);
  auto known = interpreters_.find(pid);
  if (known == interpreters_.end() || known->second.started != started) {
    Interpreter found = find(pid);
    found.started = started;
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

  const auto moved = [&position](const char* why) {
    position.status = PythonPosition::Status::kMoved;
    position.why = why;
    position.frames.clear();
    return position;
  };
  uint64_t interp = 0;
  uint64_t thread = 0;
  if (!readValue(pid, interpreter.runtime + kRuntimeMainInterpreter, interp) ||
      !readValue(pid, interp + kInterpreterThreadsHead, thread)) {
    return moved("its interpreter cannot be read");
  }
  // The thread list is newest first; the main thread is the one whose native id is the process's.
  for (size_t n = 0; thread != 0; ++n) {
    uint64_t nativeId = 0;
    if (n == kMaxThreads || !readValue(pid, thread + kThreadNativeId, nativeId)) return moved("its threads changed");
    if (nativeId == static_cast<uint64_t>(pid)) break;
    if (!readValue(pid, thread + kThreadNext, thread)) return moved("its threads changed");
  }
  uint64_t cframe = 0;
  uint64_t frame = 0;
  if (thread == 0) return moved("its main thread has no Python state");
  if (!readValue(pid, thread + kThreadCFrame, cframe) || !readValue(pid, cframe + kCFrameCurrentFrame, frame)) {
    return moved("its frames changed");
  }
  uint64_t state = kFnvOffsetBasis;
  for (size_t depth = 0; frame != 0; ++depth) {
    std::vector<char> header(kFrameLocals);
    std::vector<char> code(kCodeHeader);
    if (depth == kMaxFrames || !readMemory(pid, frame, header.data(), header.size()))
      return moved("its frames changed");
    const auto codeAddress = at<uint64_t>(header, kFrameCode);
    if (!readMemory(pid, codeAddress, code.data(), code.size()) ||
        at<uint64_t>(code, kObjectType) != interpreter.codeType) {
      return moved("its frames changed");
    }
    PythonFrame described;
    std::string lineTable;
    if (!readString(pid, at<uint64_t>(code, kCodeFilename), interpreter.unicodeType, described.file) ||
        !readString(pid, at<uint64_t>(code, kCodeQualname), interpreter.unicodeType, described.function) ||
        !readBytes(pid, at<uint64_t>(code, kCodeLineTable), interpreter.bytesType, lineTable)) {
      return moved("its frames changed");
    }
    const auto instruction =
        static_cast<int64_t>(at<uint64_t>(header, kFramePrevInstr) - (codeAddress + kCodeInstructions));
    described.line = pythonLineAt(lineTable, at<int32_t>(code, kCodeFirstLine), static_cast<int>(instruction / 2));
    state = fnv1a(state, &codeAddress, sizeof(codeAddress));
    state = fnv1a(state, &described.line, sizeof(described.line));
    if (depth == 0) {
      position.instruction =
          fnv1a(fnv1a(kFnvOffsetBasis, &codeAddress, sizeof(codeAddress)), &instruction, sizeof(instruction));
      state = fnv1a(state, &instruction, sizeof(instruction));
      // The innermost frame's variables and evaluation stack (whose depth the running frame does not store: all its
      // slots; a slot above the top holds what was last popped): a loop that computes rebinds them or pushes new
      // values, one that waits for something does not.
      const int64_t count =
          static_cast<int64_t>(at<int32_t>(code, kCodeLocalCount)) + at<int32_t>(code, kCodeStackSize);
      if (count < 0 || count > kMaxSlots) return moved("its frames changed");
      std::vector<uint64_t> locals(static_cast<size_t>(count));
      if (!locals.empty() && !readMemory(pid, frame + kFrameLocals, locals.data(), locals.size() * sizeof(uint64_t))) {
        return moved("its frames changed");
      }
      state = fnv1a(state, locals.data(), locals.size() * sizeof(uint64_t));
      interpreter.hashObjects(pid, locals, state);
    }
    position.frames.push_back(std::move(described));
    frame = at<uint64_t>(header, kFramePrevious);
  }
  position.state = state;
  return position;
}

}  // namespace ddprun::launcher
