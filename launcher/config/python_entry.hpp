#pragma once
// Which programs run under Python, and which Python: torchrun runs its entry point with the interpreter it
// runs under; ddprun is no Python program, so it picks one the way a torchrun 2.x user expects
// ($PYTHON_EXEC, torchrun's variable), then $DDPRUN_PYTHON, then python3 on PATH, and checks once, before any
// worker starts, that this interpreter can find torch.
#include <optional>
#include <string>

namespace ddprun::launcher {

/// How the program is to be started.
enum class ProgramKind {
  kDirect,  ///< executed as it is: an ELF binary, a "#!" script, or --no-python
  kPython,  ///< `python -u [-m] program args`: -m, --run-path, a ".py" name, or any other file (as torchrun)
};

/// Decides how `program` runs. `module`/`runPath`/`noPython` are the flags. Reads the first bytes of the
/// file (found on PATH, or relative to the working directory) to tell binaries and scripts from Python.
ProgramKind programKind(const std::string& program, bool module, bool runPath, bool noPython);

/// The interpreter and the variable it came from.
struct PythonChoice {
  std::string interpreter;  ///< as given (a name is looked up on PATH when it runs)
  std::string source;       ///< "PYTHON_EXEC", "DDPRUN_PYTHON" or "PATH"
};
PythonChoice choosePython();

/// Asks `interpreter` whether it can find the torch module (importlib.util.find_spec: nothing is
/// imported, nothing cached between runs). Returns a one-line warning naming the interpreter and the fix
/// when it cannot, nullopt when it can. Throws ConfigError when the interpreter cannot be run at all.
std::optional<std::string> torchProblem(const PythonChoice& python);

}  // namespace ddprun::launcher
