// Which programs run under Python, and which interpreter.
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "common/error.hpp"
#include "launcher/config/python_entry.hpp"
#include "support/child_process.hpp"

namespace ddprun::launcher {
namespace fs = std::filesystem;
namespace {

TEST(PythonEntry, BinariesAndScriptsRunDirectlyEverythingElseUnderPython) {
  const std::string dir = test::makeTempDir("entry");
  std::ofstream(dir + "/train") << "import torch\nprint('no .py suffix')\n";
  std::ofstream(dir + "/run.sh") << "#!/bin/sh\necho hi\n";
  EXPECT_EQ(programKind(dir + "/train", false, false, false), ProgramKind::kPython);
  EXPECT_EQ(programKind(dir + "/run.sh", false, false, false), ProgramKind::kDirect);
  EXPECT_EQ(programKind("/bin/true", false, false, false), ProgramKind::kDirect);
  EXPECT_EQ(programKind("true", false, false, false), ProgramKind::kDirect);  // found on PATH
  EXPECT_EQ(programKind("x.py", false, false, false), ProgramKind::kPython);
  EXPECT_EQ(programKind("pkg.mod", true, false, false), ProgramKind::kPython);
  EXPECT_EQ(programKind(dir + "/train", false, false, /*noPython=*/true), ProgramKind::kDirect);
  EXPECT_EQ(programKind("no-such-program-xyz", false, false, false), ProgramKind::kDirect);
  fs::remove_all(dir);
}

TEST(PythonEntry, InterpreterOrderAndTheTorchCheck) {
  const std::string withTorch = test::pythonExe();  // read before the test changes DDPRUN_PYTHON
  ::setenv("PYTHON_EXEC", "/usr/bin/python3", 1);
  ::setenv("DDPRUN_PYTHON", "/nowhere/python", 1);
  EXPECT_EQ(choosePython().interpreter, "/usr/bin/python3");
  EXPECT_EQ(choosePython().source, "PYTHON_EXEC");
  ::unsetenv("PYTHON_EXEC");
  EXPECT_EQ(choosePython().interpreter, "/nowhere/python");
  EXPECT_THROW(torchProblem(choosePython()), ConfigError);
  ::unsetenv("DDPRUN_PYTHON");
  EXPECT_EQ(choosePython().source, "PATH");
  // A Python with torch (Debian's python3-torch, or the GPU machine's): found. One without: one line naming it
  // and the fix.
  EXPECT_EQ(torchProblem({withTorch, "PYTHON_EXEC"}), std::nullopt);
  const std::string dir = test::makeTempDir("notorch");
  std::ofstream(dir + "/python") << "#!/bin/sh\nexec '" << withTorch << "' -I -S \"$@\"\n";  // no site-packages
  fs::permissions(dir + "/python", fs::perms::owner_all);
  auto problem = torchProblem({dir + "/python", "PYTHON_EXEC"});
  ASSERT_TRUE(problem.has_value());
  EXPECT_NE(problem->find("cannot find the torch module"), std::string::npos) << *problem;
  EXPECT_NE(problem->find("PYTHON_EXEC"), std::string::npos) << *problem;
  // A directory passes access(X_OK): it used to abort ddprun with a wrong "Permission denied".
  try {
    torchProblem({dir, "DDPRUN_PYTHON"});
    ADD_FAILURE() << "a directory was taken for an interpreter";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("(from DDPRUN_PYTHON) is not a program file"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ddprun::launcher
