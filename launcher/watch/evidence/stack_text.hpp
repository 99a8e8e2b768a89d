#pragma once
// Reading saved stacks: the native stacks of eu-stack -m (or gdb's "thread apply all bt") and Python's
// faulthandler dump. Pure text analysis: where a rank's main thread is, and whether that place waits for peers
// (a collective), for its GPU, or is the rank's own code. The symbol names below are the ones that real hangs
// show (tests/data/stacks/ holds stacks recorded from python3-torch and the C++ worker); renaming a communicator
// of the worker means updating kCollectiveMarks and its test.
#include <sys/types.h>

#include <string>
#include <vector>

namespace ddprun::launcher {

/// Where a main thread was when its stacks were taken.
enum class MainThreadPlace {
  kUnknown,     ///< no stacks of it (no tool, or the thread was not found)
  kCollective,  ///< inside a collective or the store: waits for its peers (c10d, Gloo, NCCL, ddprun's communicators)
  kGpu,         ///< inside a CUDA synchronisation: waits for its GPU, which computes or waits in a collective
  kOther,       ///< its own code: computing, sleeping, reading, waiting on a lock
  kExiting,     ///< in the process's exit path (the interpreter's finalisation, exit handlers, static destructors):
                ///< it is finishing, even where that path tears down a process group
};

const char* toString(MainThreadPlace place);

/// What the stacks say of one rank's main thread.
struct MainThread {
  MainThreadPlace place = MainThreadPlace::kUnknown;
  std::string frame;          ///< innermost frame outside the C runtime ("name(args) (module)"); "" when none
  std::string blockedIn;      ///< the innermost C runtime frame when the thread sits in one (e.g. "clock_nanosleep")
  bool inCollective = false;  ///< a collective frame is on the thread (also in the exit path: a last barrier)
  bool waitSpins = false;     ///< that collective is NCCL's, whose waits may spin on the main thread's CPU
  /// Where it is, as the function names of every frame (outermost last), without the innermost frames of a handoff
  /// of Python's GIL or a C library wait under it: two looks with the same position saw the thread in the same place
  /// (a spin); "" without stacks.
  std::string position;
  /// Its innermost frame outside the C runtime is in a numeric library (BLAS, LibTorch's kernels, SLEEF, OpenMP):
  /// it computes, whatever place it is found in look after look (most of a matrix loop's time is in one kernel), so
  /// it is never taken for a spin.
  bool computes = false;
  /// A frame of CPython's bytecode loop is on the thread: where it is in the script, not its native frames, says
  /// whether it moves (python_position.hpp).
  bool runsPython = false;
};

/// Frames of the main thread (TID == `pid`) of eu-stack -m or gdb output, innermost first, as
/// "name(args) (module)" ("??" for a frame without a name).
std::vector<std::string> mainThreadFrames(const std::string& stacks, pid_t pid);

/// Classifies the main thread of `pid` in `stacks` (see MainThreadPlace): a collective frame anywhere on the
/// thread counts (the innermost frames are usually libc's futex or a CUDA spin below the collective).
MainThread classifyMainThread(const std::string& stacks, pid_t pid);

/// The innermost frame of the main thread that lies outside the C runtime (libc, libpthread, the dynamic
/// loader, libstdc++): where the program itself waits. "" when none.
std::string innermostNativeFrame(const std::string& stacks, pid_t pid);

/// The innermost Python frame of the thread that got the signal, from faulthandler's dump
/// ("Current thread 0x… (most recent call first):\n  File "x.py", line 3 in f"); "" when none.
std::string innermostPythonFrame(const std::string& stacks);

/// Whether a main thread stopped in these frames waits for its peers in a collective: c10d (ProcessGroup*,
/// Reducer, Work::wait, the store), Gloo, NCCL, ddprun's own communicators, or a torch.distributed call in
/// Python.
bool waitsInCollective(const std::string& nativeFrame, const std::string& pythonFrame);

/// One phrase for messages: "<frame>", or "<libc call> (C library) under <frame>" outside collectives; "an unknown
/// place (no stacks)" without stacks.
std::string describe(const MainThread& thread);

}  // namespace ddprun::launcher
