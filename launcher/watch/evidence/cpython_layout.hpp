#pragma once
// Where CPython keeps what the Python position reader (python_position.hpp) follows, one row per version, as py-spy
// keeps its per-version bindings. A version not in the table is unreadable, never guessed at.
#include <cstddef>
#include <cstdint>
#include <string>

namespace ddprun::launcher {

/// Byte offsets of the fields the reader follows, for one CPython version on 64-bit Linux.
struct CPythonLayout {
  unsigned version = 0;  ///< major << 8 | minor (Py_Version >> 16), e.g. 0x030B for 3.11
  // _PyRuntimeState, PyInterpreterState, PyThreadState, _PyCFrame
  uint64_t runtimeMainInterpreter = 0, interpreterThreadsHead = 0, threadNext = 0, threadCFrame = 0, threadNativeId = 0,
           cframeCurrentFrame = 0;
  // _PyInterpreterFrame
  uint64_t frameCode = 0, framePrevious = 0, framePrevInstr = 0, frameLocals = 0;
  // PyCodeObject (codeHeader: the bytes read of it, up to and including co_code_adaptive's offset)
  uint64_t codeStackSize = 0, codeFirstLine = 0, codeLocalCount = 0, codeFilename = 0, codeQualname = 0,
           codeLineTable = 0, codeInstructions = 0, codeHeader = 0;
  // PyBytesObject, PyASCIIObject
  uint64_t bytesData = 0, unicodeState = 0, asciiData = 0;
  /// Opcodes (the low byte of a code unit) that jump backwards: the one instruction of `while True: pass`. A frame
  /// found on one instruction is a loop only where that instruction is one of these; on any other it is one long
  /// call or operation (a sort, a regular expression, a big multiplication).
  const uint8_t* backwardJumps = nullptr;
  size_t backwardJumpCount = 0;
  /// The line of the instruction at `offset` (in code units) from co_linetable (`table`) and co_firstlineno.
  int (*lineAt)(const std::string& table, int firstLine, int offset) = nullptr;

  bool jumpsBackward(uint8_t opcode) const;
};

/// The layout of CPython `version` (major << 8 | minor); nullptr when the table has none.
const CPythonLayout* cpythonLayout(unsigned version);

/// "3.11, 3.12": the versions the table holds, for messages.
std::string cpythonVersionsRead();

/// CPython 3.11's line table (Objects/locations.md): the line of the instruction at `offset` (in 2-byte code units);
/// `firstLine` for an offset before the first instruction, 0 where the table gives no line.
int pythonLineAt(const std::string& table, int firstLine, int offset);

}  // namespace ddprun::launcher
