#include "launcher/watch/evidence/cpython_layout.hpp"

#include <algorithm>
#include <iterator>

namespace ddprun::launcher {
namespace {

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

// Include/opcode.h of v3.11.2: JUMP_BACKWARD_QUICK, JUMP_BACKWARD_NO_INTERRUPT, JUMP_BACKWARD,
// POP_JUMP_BACKWARD_IF_NOT_NONE, _IF_NONE, _IF_FALSE, _IF_TRUE.
constexpr uint8_t kBackwardJumps311[] = {38, 134, 140, 173, 174, 175, 176};

/// CPython 3.11 (Include/internal/pycore_runtime.h, pycore_interp.h, pycore_frame.h, Include/cpython/pystate.h,
/// code.h and unicodeobject.h of v3.11.2). Checked by python_position_test against the interpreter itself.
CPythonLayout layout311() {
  CPythonLayout l;
  l.version = 0x030B;
  l.runtimeMainInterpreter = 48;  // _PyRuntimeState.interpreters.main
  l.interpreterThreadsHead = 16;  // PyInterpreterState.threads.head
  l.threadNext = 8;               // PyThreadState.next
  l.threadCFrame = 56;            // PyThreadState.cframe
  l.threadNativeId = 160;         // PyThreadState.native_thread_id
  l.cframeCurrentFrame = 8;       // _PyCFrame.current_frame
  l.frameCode = 32;               // _PyInterpreterFrame.f_code
  l.framePrevious = 48;           // _PyInterpreterFrame.previous
  l.framePrevInstr = 56;          // _PyInterpreterFrame.prev_instr
  l.frameLocals = 72;             // _PyInterpreterFrame.localsplus
  l.codeStackSize = 68;           // PyCodeObject.co_stacksize (int)
  l.codeFirstLine = 72;           // PyCodeObject.co_firstlineno (int)
  l.codeLocalCount = 76;          // PyCodeObject.co_nlocalsplus (int)
  l.codeFilename = 112;           // PyCodeObject.co_filename
  l.codeQualname = 128;           // PyCodeObject.co_qualname
  l.codeLineTable = 136;          // PyCodeObject.co_linetable
  l.codeInstructions = 184;       // PyCodeObject.co_code_adaptive
  l.codeHeader = 192;
  l.bytesData = 32;     // PyBytesObject.ob_sval
  l.unicodeState = 32;  // PyASCIIObject.state: interned:2 kind:3 compact:1 ascii:1 ready:1
  l.asciiData = 48;     // a compact ASCII string's characters follow its PyASCIIObject
  l.backwardJumps = kBackwardJumps311;
  l.backwardJumpCount = std::size(kBackwardJumps311);
  l.lineAt = pythonLineAt;
  return l;
}

const CPythonLayout kLayouts[] = {layout311()};

}  // namespace

bool CPythonLayout::jumpsBackward(uint8_t opcode) const {
  return std::find(backwardJumps, backwardJumps + backwardJumpCount, opcode) != backwardJumps + backwardJumpCount;
}

const CPythonLayout* cpythonLayout(unsigned version) {
  for (const CPythonLayout& layout : kLayouts) {
    if (layout.version == version) return &layout;
  }
  return nullptr;
}

std::string cpythonVersionsRead() {
  std::string text;
  for (const CPythonLayout& layout : kLayouts) {
    text +=
        (text.empty() ? "" : ", ") + std::to_string(layout.version >> 8) + "." + std::to_string(layout.version & 0xff);
  }
  return text;
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

}  // namespace ddprun::launcher
