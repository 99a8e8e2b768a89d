#include "launcher/watch/evidence/stack_text.hpp"

#include <algorithm>
#include <filesystem>
#include <sstream>

namespace ddprun::launcher {
namespace {

/// Frames that mean "waits for its peers": c10d (process groups, the reducer, Work::wait, the store), Gloo,
/// NCCL (ncclGroupEnd, pncclCommInitRank…, libnccl.so), and ddprun's communicators (worker/comm/).
constexpr const char* kCollectiveMarks[] = {"c10d::",
                                            "gloo::",
                                            "nccl",
                                            "ProcessGroup",
                                            "ddprun::worker::CollectiveQueue",
                                            "ddprun::worker::ShmGroup",
                                            "ddprun::worker::ShmCommunicator",
                                            "ddprun::worker::C10dCommunicator",
                                            "PendingCollective::wait"};

/// Functions of a process's exit path (compared with a frame's function name): CPython's finalisation, the C
/// library's exit handlers and the dynamic linker's destructors. A stock script's process group is torn down there
/// when the interpreter exits (Py_FinalizeEx -> ~ProcessGroupGloo -> gloo::transport::tcp::Loop::~Loop), which takes
/// seconds on a busy machine after a peer has already left.
constexpr const char* kExitFunctions[] = {"Py_FinalizeEx",       "Py_Exit",  "exit",          "__GI_exit",
                                          "__run_exit_handlers", "_dl_fini", "__cxa_finalize"};

/// CUDA calls that block the CPU until the GPU has finished (the runtime's and the driver's, and c10's
/// wrappers around them).
constexpr const char* kGpuSyncMarks[] = {"cudaStreamSynchronize",        "cudaDeviceSynchronize",
                                         "cudaEventSynchronize",         "cudaMemcpy",
                                         "cuStreamSynchronize",          "cuCtxSynchronize",
                                         "cuEventSynchronize",           "cuMemcpy",
                                         "c10::cuda::memcpy_and_sync",   "c10::cuda::device_synchronize",
                                         "c10::cuda::stream_synchronize"};

/// Innermost frames that say nothing of where a thread's own code is: CPython handing its GIL over, or checking for
/// signals between bytecodes, and the C library's waits under them.
constexpr const char* kHandoffFunctions[] = {"take_gil",
                                             "drop_gil",
                                             "eval_frame_handle_pending",
                                             "_Py_HandlePending",
                                             "handle_signals",
                                             "make_pending_calls",
                                             "PyEval_RestoreThread",
                                             "PyEval_SaveThread",
                                             "PyEval_AcquireThread"};

bool inRuntime(const std::string& frame) {
  for (const char* lib : {"(libc.so", "(libpthread", "(ld-linux", "(libstdc++", "(libgcc_s"}) {
    if (frame.find(lib) != std::string::npos) return true;
  }
  return false;
}

bool inCudaLibrary(const std::string& frame) {
  return frame.find("(libcuda.so") != std::string::npos || frame.find("(libcudart.so") != std::string::npos;
}

/// "#3  0x00007f… name(args) - /path/lib.so" -> "name(args) (lib.so)".
std::string describeFrame(const std::string& line) {
  std::string text = line;
  const auto address = text.find("0x");
  if (address != std::string::npos) {
    const auto space = text.find(' ', address);
    text = space == std::string::npos ? "" : text.substr(space + 1);
  }
  if (text.rfind("- ", 0) == 0) text = " " + text;  // a frame without a name: only " - module"
  const auto dash = text.rfind(" - ");
  std::string module;
  if (dash != std::string::npos) {
    module = std::filesystem::path(text.substr(dash + 3)).filename().string();
    text = text.substr(0, dash);
  }
  // gdb: "in name (args) from /path/lib.so" or "in name (args) at file.c:12".
  if (text.rfind("in ", 0) == 0) text = text.substr(3);
  const auto from = text.rfind(" from ");
  if (module.empty() && from != std::string::npos) {
    module = std::filesystem::path(text.substr(from + 6)).filename().string();
    text = text.substr(0, from);
  }
  while (!text.empty() && text.front() == ' ') text.erase(text.begin());
  if (text.empty() || text.rfind("?? ", 0) == 0) text = "??";
  return module.empty() ? text : text + " (" + module + ")";
}

bool containsAny(const std::string& text, const char* const* marks, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    if (text.find(marks[i]) != std::string::npos) return true;
  }
  return false;
}

/// The function name of a described frame, without its arguments, symbol version and module.
std::string functionName(const std::string& frame) { return frame.substr(0, frame.find_first_of("( @")); }

bool isHandoff(const std::string& frame) {
  const std::string name = functionName(frame);
  for (const char* handoff : kHandoffFunctions) {
    if (name == handoff) return true;
  }
  return false;
}

/// The frames' function names, outermost last, without a GIL handoff at the innermost end (and the C library's
/// frames under it).
std::string positionOf(const std::vector<std::string>& frames) {
  size_t first = 0;
  for (size_t i = 0; i < frames.size(); ++i) {
    if (isHandoff(frames[i])) first = i + 1;
    if (!inRuntime(frames[i]) && !isHandoff(frames[i])) break;
  }
  std::string position;
  for (size_t i = first; i < frames.size(); ++i) position += functionName(frames[i]) + ";";
  return position;
}

/// A frame of a library that does arithmetic: "(libopenblasp-r0.3.21.so)", "(libtorch_cpu.so.1.13.0)", … (a
/// collective's frames are told apart before this is asked).
bool inNumericLibrary(const std::string& frame) {
  static const char* const kLibraries[] = {"(libopenblas", "(libblas",  "(libmkl",  "(libsleef",  "(libgomp",
                                           "(libiomp",     "(libtorch", "(libdnnl", "(libcublas", "(libcudnn"};
  return containsAny(frame, kLibraries, std::size(kLibraries));
}

bool isNcclFrame(const std::string& frame) {
  return frame.find("nccl") != std::string::npos || frame.find("NCCL") != std::string::npos;
}

}  // namespace

const char* toString(MainThreadPlace place) {
  switch (place) {
    case MainThreadPlace::kUnknown: return "unknown";
    case MainThreadPlace::kCollective: return "collective";
    case MainThreadPlace::kGpu: return "gpu";
    case MainThreadPlace::kOther: return "own code";
    case MainThreadPlace::kExiting: return "exiting";
  }
  return "?";
}

std::vector<std::string> mainThreadFrames(const std::string& stacks, pid_t pid) {
  std::vector<std::string> frames;
  std::istringstream lines(stacks);
  std::string line;
  bool mainThread = false;
  const std::string euThread = "TID " + std::to_string(pid) + ":";
  while (std::getline(lines, line)) {
    if (line.rfind("TID ", 0) == 0) {
      mainThread = line == euThread;
      continue;
    }
    // gdb: "Thread 1 (Thread 0x… (LWP 1234) …):"
    if (line.rfind("Thread ", 0) == 0) {
      mainThread = line.find("(LWP " + std::to_string(pid) + ")") != std::string::npos;
      continue;
    }
    if (mainThread && line.rfind("#", 0) == 0) frames.push_back(describeFrame(line));
  }
  return frames;
}

std::string innermostNativeFrame(const std::string& stacks, pid_t pid) {
  for (const auto& frame : mainThreadFrames(stacks, pid)) {
    if (!inRuntime(frame) && frame.rfind("??", 0) != 0) return frame;  // frames without a name tell nothing
  }
  return "";
}

MainThread classifyMainThread(const std::string& stacks, pid_t pid) {
  MainThread thread;
  const auto frames = mainThreadFrames(stacks, pid);
  if (frames.empty()) return thread;
  thread.place = MainThreadPlace::kOther;
  if (inRuntime(frames.front())) thread.blockedIn = functionName(frames.front());
  thread.frame = innermostNativeFrame(stacks, pid);
  thread.position = positionOf(frames);
  thread.computes = inNumericLibrary(thread.frame);
  thread.runsPython = std::any_of(frames.begin(), frames.end(), [](const std::string& frame) {
    return functionName(frame).rfind("_PyEval_EvalFrame", 0) == 0;
  });
  bool gpu = inCudaLibrary(frames.front());
  for (const auto& frame : frames) {
    if (containsAny(frame, kCollectiveMarks, std::size(kCollectiveMarks))) {
      thread.inCollective = true;
      thread.waitSpins = thread.waitSpins || isNcclFrame(frame);
    }
    if (!thread.inCollective) gpu = gpu || containsAny(functionName(frame), kGpuSyncMarks, std::size(kGpuSyncMarks));
  }
  for (const auto& frame : frames) {
    const std::string name = functionName(frame);
    for (const char* exitFunction : kExitFunctions) {
      if (name == exitFunction) {
        thread.place = MainThreadPlace::kExiting;
        return thread;
      }
    }
  }
  if (thread.inCollective) {
    thread.place = MainThreadPlace::kCollective;
  } else if (gpu) {
    thread.place = MainThreadPlace::kGpu;
  }
  return thread;
}

bool waitsInCollective(const std::string& nativeFrame, const std::string& pythonFrame) {
  if (containsAny(nativeFrame, kCollectiveMarks, std::size(kCollectiveMarks))) return true;
  return pythonFrame.find("torch/distributed/") != std::string::npos;
}

std::string innermostPythonFrame(const std::string& stacks) {
  auto start = stacks.find("Current thread ");
  if (start == std::string::npos) start = stacks.find("Thread 0x");
  if (start == std::string::npos) return "";
  const auto file = stacks.find("  File \"", start);
  if (file == std::string::npos) return "";
  const auto end = stacks.find('\n', file);
  return stacks.substr(file + 2, end == std::string::npos ? std::string::npos : end - file - 2);
}

std::string describe(const MainThread& thread) {
  if (thread.frame.empty() && thread.blockedIn.empty()) return "an unknown place (no stacks)";
  // Where it waits in the C library tells most about its own code (sleeping, reading, a lock); inside a
  // collective the collective's frame does.
  if (thread.blockedIn.empty() || thread.place == MainThreadPlace::kCollective ||
      thread.place == MainThreadPlace::kExiting) {
    return thread.frame.empty() ? thread.blockedIn : thread.frame;
  }
  if (thread.frame.empty()) return thread.blockedIn + " (C library)";
  return thread.blockedIn + " (C library) under " + thread.frame;
}

}  // namespace ddprun::launcher
