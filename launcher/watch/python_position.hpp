#pragma once
// Where a Python rank's main thread is in its script: the frames of CPython's interpreter (file, function, line) and
// the innermost frame's local variables, read from the running process's memory with process_vm_readv(2), as py-spy
// and austin do, without stopping it. The hang rule (hang_rule.hpp) needs this to tell a rank that spins
// (`while not ready: pass`: the same lines, nothing changes) from one that computes in pure Python (its variables
// change), which native stacks cannot: both run in the interpreter's bytecode loop.
//
// The layout is CPython 3.11's, the Python of Debian 12 and of its python3-torch (Include/internal/pycore_runtime.h,
// pycore_interp.h, pycore_frame.h, Include/cpython/pystate.h, code.h and unicodeobject.h of v3.11.2; the line table
// per Objects/locations.md). Other versions are recognised (the exported Py_Version) and reported as unreadable, never
// guessed at: every pointer followed is checked against the type it must have (PyCode_Type, PyUnicode_Type,
// PyBytes_Type), so a read that races the interpreter fails rather than returning a wrong place.
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

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
  /// variables and evaluation stack (the objects they name, and those objects' values) are the same. A loop that
  /// changes nothing comes back to the same few states (a few per line of its body); one that computes reaches new
  /// ones.
  uint64_t state = 0;
  /// The innermost frame's code object and bytecode offset: a loop moves over several, one long call (a sort, a
  /// regular expression, a C extension's work) stays on one.
  uint64_t instruction = 0;
  /// "File "train.py", line 12, in wait" for the innermost frame; "" when none.
  std::string where() const;
};

/// Reads the main thread's Python stack of processes this process may trace (a parent may: Yama's ptrace_scope 1).
/// Remembers each process's interpreter (found once, from the ELF dynamic symbols of its executable or libpython).
class PythonPositionReader {
 public:
  /// Never throws; whatever fails is a status and its reason.
  PythonPosition read(pid_t pid);

 private:
  struct Interpreter {
    uint64_t started = 0;  ///< the process's start time (proc(5) stat field 22): a pid reused is another process
    PythonPosition::Status status = PythonPosition::Status::kNotPython;
    std::string why;
    uint64_t runtime = 0;  ///< &_PyRuntime
    uint64_t codeType = 0, unicodeType = 0, bytesType = 0;
    /// Types whose value (or the part of it that changes as a loop works) follows the object's header, by type
    /// address: how many bytes of it to read (kValueFields).
    std::map<uint64_t, size_t> valueBytes;
    /// Adds to `hash` the type of each of `objects` (addresses in `pid`; 0 skipped) and, for the types in
    /// `valueBytes`, its value.
    void hashObjects(pid_t pid, const std::vector<uint64_t>& objects, uint64_t& hash) const;
  };
  Interpreter find(pid_t pid) const;
  std::map<pid_t, Interpreter> interpreters_;
};

/// The line of the instruction at `offset` (in 2-byte code units) of a code object whose co_firstlineno is
/// `firstLine` and whose co_linetable is `table` (CPython 3.11's format, Objects/locations.md); `firstLine` for an
/// offset before the first instruction, 0 where the table gives no line.
int pythonLineAt(const std::string& table, int firstLine, int offset);

}  // namespace ddprun::launcher
