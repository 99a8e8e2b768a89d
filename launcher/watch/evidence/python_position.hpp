#pragma once
// Where a Python rank's main thread is in its script: the frames of CPython's interpreter (file, function, line) and
// the innermost frame's local variables, read from the running process's memory with process_vm_readv(2), as py-spy
// and austin do, without stopping it. The hang rule (hang_rule.hpp) needs this to tell a rank that spins
// (`while not ready: pass`: the same lines, nothing changes) from one that computes in pure Python (its variables
// change), which native stacks cannot: both run in the interpreter's bytecode loop.
//
// The layouts come from a table keyed by the interpreter's exported Py_Version (cpython_layout.hpp); a version not in
// it is reported as unreadable, never guessed at. Every pointer followed is checked against the type it must have
// (PyCode_Type, PyUnicode_Type, PyBytes_Type), so a read that races the interpreter fails rather than returning a wrong
// place. Nothing the process holds sizes what is read: frames, slots, strings, line tables and values are bounded per
// read (about 1 MiB in all), and the interpreter's files are opened as untrusted (common/elf_section.hpp). Runs on the
// watch's reader thread (machine_evidence.hpp), never on the agent's loop.
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "launcher/watch/evidence/cpython_layout.hpp"

namespace ddprun::launcher {

/// One frame of a Python stack.
struct PythonFrame {
  std::string file;      ///< co_filename
  std::string function;  ///< co_qualname
  int line = 0;          ///< the line of the instruction it runs (or last ran, in frames that called another)
};

/// What one read of a process found.
struct PythonPosition {
  enum class Status {
    kNotPython,   ///< no CPython interpreter in the process (a C++ worker, say)
    kUnreadable,  ///< a CPython this reader cannot read (another version), or memory it may not read
    kMoved,       ///< the read raced the interpreter (a frame changed under it): it is somewhere else now
    kRead,
  };
  Status status = Status::kNotPython;
  std::string why;                  ///< kUnreadable, kMoved: what stopped the read, in words
  std::vector<PythonFrame> frames;  ///< innermost first (kRead)
  /// Equal for two reads exactly when the frames, their lines, the innermost frame's bytecode offset, and its local
  /// variables and evaluation stack (the objects they name, and those objects' values, an iterator's position
  /// included) are the same. A loop that changes nothing comes back to the same few states (a few per line of its
  /// body); one that computes reaches new ones.
  uint64_t state = 0;
  /// The innermost frame's code object and bytecode offset: a loop moves over several, one long call (a sort, a
  /// regular expression, a C extension's work) stays on one.
  uint64_t instruction = 0;
  /// The innermost frame's instruction jumps backwards: a loop of that one instruction (`while True: pass`).
  bool backwardJump = false;
  /// "File "train.py", line 12, in wait" for the innermost frame; "" when none.
  std::string where() const;
};

/// Reads the main thread's Python stack of processes this process may trace (a parent may: Yama's ptrace_scope 1).
/// Remembers each process's interpreter (found once, from the ELF dynamic symbols of its executable or libpython), and
/// finds it again when the process has execed since (its auxiliary vector changed).
class PythonPositionReader {
 public:
  /// Never throws; whatever fails is a status and its reason.
  PythonPosition read(pid_t pid);
  /// Bytes of strings, line tables and values the last read fetched (at most about 1 MiB, whatever the process holds).
  size_t lastReadBytes() const { return lastReadBytes_; }

 private:
  struct Interpreter {
    uint64_t started = 0;  ///< the process's start time (proc(5) stat field 22): a pid reused is another process
    uint64_t image = 0;    ///< a hash of /proc/PID/auxv: an exec changes it
    PythonPosition::Status status = PythonPosition::Status::kNotPython;
    std::string why;
    const CPythonLayout* layout = nullptr;
    uint64_t runtime = 0;  ///< &_PyRuntime
    uint64_t codeType = 0, unicodeType = 0, bytesType = 0;
    /// Types whose value (or the part of it that changes as a loop works) follows the object's header, by type
    /// address: how many bytes of it to read (kValueFields).
    std::map<uint64_t, size_t> valueBytes;
  };
  /// What a code object says of itself, kept while its header stays the same.
  struct Code {
    std::string header;  ///< the bytes of its header that name the strings below and its first line
    PythonFrame names;   ///< file and function
    std::string lineTable;
  };
  Interpreter find(pid_t pid) const;
  bool readCode(pid_t pid, const Interpreter& interpreter, uint64_t address, const std::vector<char>& header,
                Code*& code, size_t& budget);
  /// Returns what is left of `budget`.
  size_t hashObjects(pid_t pid, const Interpreter& interpreter, const std::vector<uint64_t>& objects, uint64_t& hash,
                     size_t budget) const;
  std::map<pid_t, Interpreter> interpreters_;
  size_t lastReadBytes_ = 0;
  std::map<std::pair<pid_t, uint64_t>, Code> codes_;  ///< by process and address (cleared past a bound)
};

}  // namespace ddprun::launcher
